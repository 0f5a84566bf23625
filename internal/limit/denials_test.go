package limit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// windows is a Counter of fixed windows that spend only if they allow (as
// the store's for /limits/check) and token buckets kept as "tokens", on the
// test's clock. It counts the calls and records the takes of the last one.
type windows struct {
	mu     sync.Mutex
	now    func() time.Time
	calls  int
	last   []limit.Take
	count  map[limit.Key]int64
	reset  map[limit.Key]time.Time
	tokens map[limit.Key]float64 // a bucket that never refills within a test
	down   bool
}

func newWindows(now func() time.Time) *windows {
	return &windows{now: now, count: map[limit.Key]int64{}, reset: map[limit.Key]time.Time{}, tokens: map[limit.Key]float64{}}
}

func (w *windows) Take(_ context.Context, takes []limit.Take) ([]limit.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	w.last = append([]limit.Take(nil), takes...)
	if w.down {
		return nil, errRedisDown
	}
	now := w.now()
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		if t.Algorithm == limit.TokenBucket {
			left, ok := w.tokens[t.Key]
			if !ok {
				left = float64(t.Limit)
			}
			r := limit.Result{Limit: t.Limit, Allowed: float64(t.Cost) <= left}
			if r.Allowed && !t.Hold {
				left -= float64(t.Cost)
				w.tokens[t.Key] = left
				r.Spent = t.Cost > 0
			}
			if !r.Allowed {
				r.RetryAfter = time.Duration((float64(t.Cost) - left) / t.Rate * float64(time.Second))
			}
			r.Remaining = int64(left)
			r.ResetAfter = time.Duration((float64(t.Limit) - left) / t.Rate * float64(time.Second))
			res[i] = r
			continue
		}
		if !now.Before(w.reset[t.Key]) {
			w.count[t.Key], w.reset[t.Key] = 0, now.Add(t.Window)
		}
		c := w.count[t.Key]
		r := limit.Result{Limit: t.Limit, Allowed: c+t.Cost <= t.Limit, ResetAfter: w.reset[t.Key].Sub(now)}
		if r.Allowed && !t.Hold {
			c += t.Cost
			w.count[t.Key] = c
			r.Spent = t.Cost > 0
		}
		if !r.Allowed {
			r.RetryAfter = r.ResetAfter
		}
		r.Count, r.Remaining = c, max(0, t.Limit-c)
		res[i] = r
	}
	// All or nothing, as the store's one script per slot: a denial undoes
	// the batch's spends.
	for i, r := range res {
		if r.Allowed || !takes[i].AllOrNothing || takes[i].Shadow {
			continue
		}
		for j, t := range takes {
			if res[j].Spent {
				if t.Algorithm == limit.TokenBucket {
					w.tokens[t.Key] += float64(t.Cost)
				} else {
					w.count[t.Key] -= t.Cost
				}
				res[j].Spent = false
			}
		}
		break
	}
	return res, nil
}

func (w *windows) Refund(context.Context, []limit.Take) error { return nil }

func (w *windows) callsSoFar() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

func denialPolicies() map[string]limit.Policy {
	return map[string]limit.Policy{
		"login":  {Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute},
		"api":    {Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 1},
		"search": {Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute},
	}
}

// TestDeniedKeyIsAnsweredFromMemory: a key hammered while its window is
// full costs no call to the store until the window resets, then asks the
// store again.
func TestDeniedKeyIsAnsweredFromMemory(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	store := newWindows(clk.now)
	denials := limit.NewDenials(0, clk.now)
	l := limit.New(denialPolicies(), store, nil).WithDenials(denials)
	check := func(policy, key string, cost int64) limit.Decision {
		t.Helper()
		b, err := l.Check(context.Background(), []limit.Check{{Policy: policy, Key: key, Cost: cost}})
		if err != nil {
			t.Fatal(err)
		}
		return b.Decisions[0]
	}

	for i := range 3 {
		if d := check("login", "u", 1); !d.Allowed || d.Mode != limit.ModeExact {
			t.Fatalf("hit %d of 3: %+v, want allowed, exact", i+1, d)
		}
	}
	if d := check("login", "u", 1); d.Allowed || d.Mode != limit.ModeExact {
		t.Fatalf("4th hit: %+v, want denied by the store", d)
	}
	calls := store.callsSoFar()
	for i := range 100 {
		clk.t = clk.t.Add(500 * time.Millisecond) // 50 s of hammering
		d := check("login", "u", 1)
		if d.Allowed || d.Mode != limit.ModeMemory || d.RetryAfter <= 0 || d.Limit != 3 {
			t.Fatalf("repeat %d: %+v, want denied from memory with a retry", i, d)
		}
	}
	if got := store.callsSoFar() - calls; got != 0 {
		t.Errorf("100 repeats of a denied check made %d store calls, want 0", got)
	}
	if d := check("login", "other", 1); !d.Allowed || d.Mode != limit.ModeExact {
		t.Errorf("another key: %+v, want allowed by the store", d)
	}
	if d := check("login", "u", 0); !d.Allowed || d.Mode != limit.ModeExact {
		t.Errorf("a peek: %+v, want asked of the store (a peek is never a denial)", d)
	}

	clk.t = clk.t.Add(10 * time.Second) // past the window's reset
	calls = store.callsSoFar()
	if d := check("login", "u", 1); !d.Allowed || d.Mode != limit.ModeExact {
		t.Errorf("after the window reset: %+v, want allowed by the store", d)
	}
	if got := store.callsSoFar() - calls; got != 1 {
		t.Errorf("after the reset: %d store calls, want 1", got)
	}
}

// TestDeniedBucketIsRememberedForItsCost: an empty bucket's denial holds
// for the same cost or more until it would refill that much; a smaller
// cost is asked of the store.
func TestDeniedBucketIsRememberedForItsCost(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	store := newWindows(clk.now)
	l := limit.New(denialPolicies(), store, nil).WithDenials(limit.NewDenials(0, clk.now))
	check := func(cost int64) limit.Decision {
		t.Helper()
		b, err := l.Check(context.Background(), []limit.Check{{Policy: "api", Key: "k", Cost: cost}})
		if err != nil {
			t.Fatal(err)
		}
		return b.Decisions[0]
	}
	check(4) // 1 left
	if d := check(3); d.Allowed || d.Mode != limit.ModeExact || d.RetryAfter != 2*time.Second {
		t.Fatalf("cost 3 with 1 left: %+v, want denied by the store, retry 2s", d)
	}
	for _, tc := range []struct {
		cost int64
		mode limit.Mode
	}{{3, limit.ModeMemory}, {5, limit.ModeMemory}, {2, limit.ModeExact}, {1, limit.ModeExact}} {
		d := check(tc.cost)
		if d.Mode != tc.mode {
			t.Errorf("cost %d: mode %s, want %s", tc.cost, d.Mode, tc.mode)
		}
		if tc.mode == limit.ModeMemory && (d.Allowed || d.RetryAfter < 2*time.Second-time.Millisecond) {
			t.Errorf("cost %d from memory: %+v, want denied, retry about 2s or more", tc.cost, d)
		}
	}
	clk.t = clk.t.Add(2 * time.Second)
	if d := check(3); d.Mode != limit.ModeExact {
		t.Errorf("cost 3 once the retry has passed: mode %s, want asked of the store", d.Mode)
	}
}

// TestDenialsRememberOnlyWhatRedisAloneDecided: a fallback's denial (the
// store did not answer) and a denial that depends on another check of its
// batch (the same key twice) are not remembered; a batch denied from
// memory still decides its other checks, held, spending nothing.
func TestDenialsRememberOnlyWhatRedisAloneDecided(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	store := newWindows(clk.now)
	policies := denialPolicies()
	l := limit.New(policies, store, nil).WithDenials(limit.NewDenials(0, clk.now))
	check := func(checks ...limit.Check) limit.Batch {
		t.Helper()
		b, err := l.Check(context.Background(), checks)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// 2 then 2 of 3 in one batch: the second is denied only because of
	// the first, which the store did not spend.
	b := check(limit.Check{Policy: "login", Key: "pair", Cost: 2}, limit.Check{Policy: "login", Key: "pair", Cost: 2})
	if b.Allowed {
		t.Fatalf("2 + 2 of 3: allowed")
	}
	if d := check(limit.Check{Policy: "login", Key: "pair", Cost: 2}).Decisions[0]; !d.Allowed || d.Mode != limit.ModeExact {
		t.Errorf("after a batch denied by its own repeat: %+v, want allowed by the store", d)
	}

	// Denied from memory: the batch's other check is held.
	check(limit.Check{Policy: "login", Key: "full", Cost: 3})
	check(limit.Check{Policy: "login", Key: "full", Cost: 1}) // remembered
	b = check(limit.Check{Policy: "search", Key: "s", Cost: 1}, limit.Check{Policy: "login", Key: "full", Cost: 1})
	if b.Allowed || b.Decisions[1].Mode != limit.ModeMemory || !b.Decisions[0].Allowed || b.Decisions[0].Mode != limit.ModeExact {
		t.Fatalf("batch with a remembered denial: %+v", b)
	}
	if len(store.last) != 1 || !store.last[0].Hold {
		t.Errorf("store was asked %+v, want only search, held", store.last)
	}
	if store.count[limit.PolicyKey("search", "s")] != 0 {
		t.Errorf("the held check spent")
	}

	// Redis failing to answer forgets every remembered denial: it may come
	// back without their counters.
	store.down = true
	if _, err := l.Check(context.Background(), []limit.Check{{Policy: "search", Key: "s2", Cost: 1}}); err == nil {
		t.Fatal("store down, no fallback: no error")
	}
	store.down = false
	store.count[limit.PolicyKey("login", "full")] = 0 // as a Redis restarted empty
	if d := check(limit.Check{Policy: "login", Key: "full", Cost: 1}).Decisions[0]; !d.Allowed || d.Mode != limit.ModeExact {
		t.Errorf("after the store failed and came back empty: %+v, want allowed by the store", d)
	}

	// A fallback decision is not Redis's: never remembered.
	fb := resilience.NewFallback(resilience.FallbackOptions{Counter: store, Now: clk.now})
	policies["open"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, OnStoreError: limit.FallbackOpen}
	lf := limit.New(policies, fb, nil).WithDenials(limit.NewDenials(0, clk.now))
	store.down = true
	for i, want := range []bool{true, false} {
		b, err := lf.Check(context.Background(), []limit.Check{{Policy: "open", Key: "o", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if d := b.Decisions[0]; d.Allowed != want || d.Mode != limit.ModeFallback {
			t.Fatalf("check %d with the store down: %+v, want allowed %v by the fallback", i, d, want)
		}
	}
	store.down = false
	if d, _ := lf.Check(context.Background(), []limit.Check{{Policy: "open", Key: "o", Cost: 1}}); d.Decisions[0].Mode != limit.ModeExact {
		t.Errorf("store back: mode %s, want exact (a fallback denial is not remembered)", d.Decisions[0].Mode)
	}
}
