package redistest

import (
	"sync"
	"testing"
	"time"
)

// LagMonitor measures how late this process wakes a 1 ms timer. On a
// CPU-starved machine (2 cores, -race, other packages' tests running) every
// goroutine runs late: a decision that waits a 10 ms timeout returns late by
// as much, through no fault of the code under test. Timing assertions
// allow for that lag, and for nothing else.
type LagMonitor struct {
	mu      sync.Mutex
	samples []lagSample
	done    chan struct{}
	stopped chan struct{}
}

type lagSample struct {
	start, end time.Time
	lag        time.Duration
}

const lagTick = time.Millisecond

// StartLagMonitor starts sampling; it stops when the test ends.
func StartLagMonitor(t testing.TB) *LagMonitor {
	m := &LagMonitor{done: make(chan struct{}), stopped: make(chan struct{})}
	go m.run()
	t.Cleanup(func() { close(m.done); <-m.stopped })
	return m
}

func (m *LagMonitor) run() {
	defer close(m.stopped)
	tm := time.NewTimer(lagTick)
	defer tm.Stop()
	for {
		start := time.Now()
		tm.Reset(lagTick)
		select {
		case <-m.done:
			return
		case <-tm.C:
		}
		end := time.Now()
		m.mu.Lock()
		m.samples = append(m.samples, lagSample{start: start, end: end, lag: max(0, end.Sub(start)-lagTick)})
		if len(m.samples) > 20_000 { // keep the last ~20 s
			m.samples = append(m.samples[:0], m.samples[len(m.samples)-10_000:]...)
		}
		m.mu.Unlock()
	}
}

// Max is the worst lag of the samples that overlap [from, to].
func (m *LagMonitor) Max(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var worst time.Duration
	for i := len(m.samples) - 1; i >= 0; i-- {
		s := m.samples[i]
		if s.end.Before(from) {
			break
		}
		if !s.start.After(to) {
			worst = max(worst, s.lag)
		}
	}
	return worst
}

// Within reports whether a call that ran from start for el kept bound,
// allowing for the lag this process suffered meanwhile, and that lag. It
// first waits (up to a second) for a sample that ends after the call: the
// one in flight is the one a starved process is late on.
func (m *LagMonitor) Within(start time.Time, el, bound time.Duration) (bool, time.Duration) {
	end := start.Add(el)
	if el > bound {
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && m.lastEnd().Before(end); {
			time.Sleep(lagTick)
		}
	}
	lag := m.Max(start, end)
	return el <= bound+lag, lag
}

func (m *LagMonitor) lastEnd() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return time.Time{}
	}
	return m.samples[len(m.samples)-1].end
}
