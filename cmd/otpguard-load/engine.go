package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// lateAfter is how far behind its intended time a request may be sent
// before it counts as late: the generator had no free connection, or fell
// behind. Go's timers wake up to about 1 ms late on an idle machine.
const lateAfter = time.Millisecond

// clock is the time the schedule runs on: the wall clock, or a test's.
type clock interface {
	Now() time.Time
	SleepUntil(time.Time)
}

type wallClock struct{}

func (wallClock) Now() time.Time         { return time.Now() }
func (wallClock) SleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// schedule hands out the requests of a run: at a fixed rate, request i is
// due at start + i/rate whether or not earlier ones were answered (an open
// loop), and its latency counts from then, so a slow answer shows as the
// latency of every request that waited behind it, not as fewer requests.
// At rate 0 (a closed loop) a request is due when a connection is free.
type schedule struct {
	clock  clock
	rate   uint64
	start  time.Time
	end    time.Time     // no request is due at or after it
	total  uint64        // requests due at a fixed rate
	grace  time.Duration // how long after end a due request may still be sent
	next   atomic.Uint64
	halted atomic.Bool // interrupted: send nothing more
}

func newSchedule(clk clock, rate int, d, grace time.Duration) *schedule {
	s := &schedule{clock: clk, rate: uint64(rate), start: clk.Now(), grace: grace}
	s.end = s.start.Add(d)
	s.total = uint64(rate) * uint64(d) / uint64(time.Second)
	return s
}

// take returns the next request and when it is due; ok is false when the
// run is over.
func (s *schedule) take() (i uint64, due time.Time, ok bool) {
	if s.halted.Load() {
		return 0, time.Time{}, false
	}
	if s.rate == 0 {
		now := s.clock.Now()
		return s.next.Add(1) - 1, now, now.Before(s.end)
	}
	i = s.next.Add(1) - 1
	if i >= s.total {
		return i, time.Time{}, false
	}
	return i, s.start.Add(time.Duration(i * uint64(time.Second) / s.rate)), true
}

// expired says a request due at due can no longer be sent: the run ended
// more than grace ago (a stalled server holds every connection).
func (s *schedule) expired(now time.Time) bool { return now.After(s.end.Add(s.grace)) }

// tally is what one connection measured; merged at the end.
type tally struct {
	hist      histogram
	codes     map[int]uint64 // status codes; 0: no answer
	sendCodes map[int]uint64 // those of POST /otp/send (mixed load)
	late      uint64
	notSent   uint64
	errs      map[string]uint64
	lastSent  time.Time
	lastDone  time.Time
}

func newTally() *tally {
	return &tally{codes: map[int]uint64{}, sendCodes: map[int]uint64{}, errs: map[string]uint64{}}
}

// loader is one run's shared parts.
type loader struct {
	c     *Config
	sched *schedule
	tgt   target
	enc   *encoder
	sends atomic.Uint64
	done  atomic.Uint64 // requests answered or failed, for the progress lines
}

// conn is one kept-alive connection and the goroutine that drives it.
type conn struct {
	l       *loader
	nc      net.Conn
	r       *bufio.Reader
	req     []byte
	scratch []byte
	t       *tally
}

// run sends requests as the schedule hands them out until it ends.
func (c *conn) run() {
	defer c.close()
	clk := c.l.sched.clock
	for {
		i, due, ok := c.l.sched.take()
		if !ok {
			return
		}
		now := clk.Now()
		if c.l.sched.expired(now) {
			c.t.notSent++
			c.t.codes[0]++
			c.t.hist.add(now.Sub(due)) // at least this late: the wait so far
			continue
		}
		if due.After(now) {
			clk.SleepUntil(due)
			now = clk.Now()
		}
		if now.Sub(due) > lateAfter {
			c.t.late++
		}
		c.t.lastSent = now
		send := c.l.c.isSend(i)
		code, err := c.do(i, send)
		done := clk.Now()
		c.record(code, err, send, done.Sub(due))
		c.t.lastDone = done
		c.l.done.Add(1)
	}
}

func (c *conn) record(code int, err error, send bool, latency time.Duration) {
	c.t.hist.add(latency)
	c.t.codes[code]++
	if send {
		c.t.sendCodes[code]++
	}
	if err != nil {
		c.t.errs[err.Error()]++
	}
}

// do sends request i and reads its answer, (re)connecting if need be; the
// status is 0 when there was no answer.
func (c *conn) do(i uint64, send bool) (int, error) {
	timeout := c.l.c.Timeout
	if c.nc == nil {
		nc, err := c.l.tgt.dial(timeout)
		if err != nil {
			return 0, err
		}
		c.nc = nc
		c.r = bufio.NewReaderSize(nc, 4096)
	}
	var sendNo uint64
	if send {
		sendNo = c.l.sends.Add(1) - 1
	}
	c.req, c.scratch = c.l.enc.appendRequest(c.req[:0], c.scratch, i, send, sendNo)
	_ = c.nc.SetDeadline(time.Now().Add(timeout))
	if _, err := c.nc.Write(c.req); err != nil {
		c.close()
		return 0, err
	}
	res, err := readResponse(c.r)
	if err != nil {
		c.close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errTimeout
		}
		return 0, err
	}
	if !res.KeepAlive {
		c.close()
	}
	return res.Status, nil
}

var errTimeout = errors.New("timeout: no answer within -timeout")

func (c *conn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.r = nil, nil
	}
}

// runLoad drives n connections until the schedule ends (or ctx is done:
// then it sends nothing more) and returns what they measured, merged.
func runLoad(ctx context.Context, l *loader, n int) *tally {
	tallies := make([]*tally, n)
	var wg sync.WaitGroup
	for k := range n {
		tallies[k] = newTally()
		c := &conn{l: l, t: tallies[k]}
		wg.Go(c.run)
	}
	stop := context.AfterFunc(ctx, func() { l.sched.halted.Store(true) })
	defer stop()
	wg.Wait()
	all := newTally()
	for _, t := range tallies {
		all.merge(t)
	}
	return all
}

func (t *tally) merge(o *tally) {
	t.hist.merge(&o.hist)
	for k, v := range o.codes {
		t.codes[k] += v
	}
	for k, v := range o.sendCodes {
		t.sendCodes[k] += v
	}
	for k, v := range o.errs {
		t.errs[k] += v
	}
	t.late += o.late
	t.notSent += o.notSent
	if o.lastSent.After(t.lastSent) {
		t.lastSent = o.lastSent
	}
	if o.lastDone.After(t.lastDone) {
		t.lastDone = o.lastDone
	}
}
