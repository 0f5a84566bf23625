package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The denied-key memory measured in simulated time: one key hammered at
// 1,000 requests a second against a limit of 10 a second, on a model of
// otpguard's two algorithms that runs on the same fake clock as the
// client (otpguard's own rules: a fixed window from the first hit that
// spends only when it allows; a token bucket that spends nothing when it
// denies; retry_after rounded up to whole milliseconds). It counts the
// requests the server received, with and without the memory, and checks
// that every request got the same answer both ways.

// limitModel is one key of one policy, on the clock now.
type limitModel struct {
	mu        sync.Mutex
	now       func() time.Time
	algorithm string
	limit     int64
	window    time.Duration
	// fixed window
	start time.Time
	count int64
	// token bucket (refill limit per window)
	tat  time.Time
	hits int
}

func (m *limitModel) decide(cost int64) (allowed bool, remaining int64, retry, reset time.Duration) {
	now := m.now()
	switch m.algorithm {
	case "fixed_window":
		if m.start.IsZero() || !now.Before(m.start.Add(m.window)) {
			m.start, m.count = now, 0
		}
		end := m.start.Add(m.window)
		if m.count+cost <= m.limit {
			m.count += cost
			return true, m.limit - m.count, 0, end.Sub(now)
		}
		return false, m.limit - m.count, end.Sub(now), end.Sub(now)
	default: // token bucket, as GCRA on whole nanoseconds (otpguard's
		// script is GCRA too): tat is when the bucket is full again.
		every := m.window / time.Duration(m.limit) // one token
		burst := every * time.Duration(m.limit)
		tat := m.tat
		if tat.Before(now) {
			tat = now
		}
		next := tat.Add(every * time.Duration(cost))
		if over := next.Sub(now) - burst; over > 0 {
			return false, int64((burst - tat.Sub(now)) / every), over, tat.Sub(now)
		}
		m.tat = next
		return true, int64((burst - next.Sub(now)) / every), 0, next.Sub(now)
	}
}

func (m *limitModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req checkBatchJSON
	_ = json.NewDecoder(r.Body).Decode(&req)
	m.mu.Lock()
	m.hits++
	ok, rem, retry, reset := m.decide(req.Checks[0].Cost)
	m.mu.Unlock()
	ms := func(d time.Duration) int64 { return (int64(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond) }
	status := 200
	if !ok {
		status = 429
	}
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"p";q=%d;w=%d`, m.limit, int(m.window.Seconds())))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(checkResponseJSON{Allowed: ok, Decisions: []decisionJSON{{
		Policy: "p", Key: "k", Mode: "exact", Allowed: ok, Limit: m.limit, Remaining: rem,
		RetryAfterMs: ms(retry), ResetAfterMs: ms(reset)}}})
}

// simulation is one run: requests a second for a duration, against a
// limit per second, with or without the memory.
type simulation struct {
	algorithm string
	rate      int // requests per second
	limit     int64
	seconds   int
	memory    bool
}

type simResult struct {
	requests, allowed, serverHits int
	answers                       []bool
}

func (s simulation) run(tb testing.TB) simResult {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	model := &limitModel{now: clk.Now, algorithm: s.algorithm, limit: s.limit, window: time.Second}
	srv := httptest.NewServer(model)
	defer srv.Close()
	size := 0
	if s.memory {
		size = DefaultDenialMemory
	}
	c, err := New(srv.URL, WithClock(clk.Now), WithDenialMemory(size))
	if err != nil {
		tb.Fatal(err)
	}
	step := time.Second / time.Duration(s.rate)
	res := simResult{requests: s.rate * s.seconds}
	res.answers = make([]bool, 0, res.requests)
	for range res.requests {
		r, err := c.Check(context.Background(), Check{Policy: "p", Key: "k"})
		if err != nil {
			tb.Fatal(err)
		}
		res.answers = append(res.answers, r.Allowed)
		if r.Allowed {
			res.allowed++
		}
		clk.Add(step)
	}
	res.serverHits = model.hits
	return res
}

func TestDeniedKeyMemorySimulated(t *testing.T) {
	for _, alg := range []string{"fixed_window", "token_bucket"} {
		t.Run(alg, func(t *testing.T) {
			sim := simulation{algorithm: alg, rate: 1000, limit: 10, seconds: 3}
			without := sim.run(t)
			sim.memory = true
			with := sim.run(t)
			// The memory changes no answer: exact.
			for i := range without.answers {
				if without.answers[i] != with.answers[i] {
					t.Fatalf("request %d: allowed %v with the memory, %v without", i, with.answers[i], without.answers[i])
				}
			}
			if without.serverHits != without.requests {
				t.Errorf("without memory: %d server hits for %d requests", without.serverHits, without.requests)
			}
			// Each second: the 10 allowed, and a few denials whose retry
			// time is near (the memory ends a millisecond early).
			if max := sim.seconds * 40; with.serverHits > max {
				t.Errorf("with memory: %d server hits, want at most %d", with.serverHits, max)
			}
			t.Logf("%s: %d requests, %d allowed; server hits %d without the memory, %d with it (%.1f %% saved)",
				alg, with.requests, with.allowed, without.serverHits, with.serverHits,
				100*(1-float64(with.serverHits)/float64(without.serverHits)))
		})
	}
}

// BenchmarkDeniedKeyMemory reports the server hits of one key hammered at
// 1,000 requests a second for 10 simulated seconds against a limit of 10
// a second: hits/10k-requests with and without the memory.
func BenchmarkDeniedKeyMemory(b *testing.B) {
	for _, alg := range []string{"fixed_window", "token_bucket"} {
		for _, mem := range []bool{false, true} {
			name := alg + "/memory=off"
			if mem {
				name = alg + "/memory=on"
			}
			b.Run(name, func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulation{algorithm: alg, rate: 1000, limit: 10, seconds: 10, memory: mem}.run(b)
				}
				b.ReportMetric(float64(r.serverHits), "server-hits/10k-req")
				b.ReportMetric(float64(r.allowed), "allowed/10k-req")
			})
		}
	}
}
