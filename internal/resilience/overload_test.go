package resilience_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
)

// queuedStore answers like a healthy Redis behind a saturated host: each
// Take is counted at once (as Redis would on receipt), and its reply is
// held until the test releases it, or until the caller's context ends.
type queuedStore struct {
	mu      sync.Mutex
	count   map[limit.Key]int64
	release chan struct{}
	calls   atomic.Int64
	done    sync.WaitGroup // calls that have not returned yet
}

func newQueuedStore() *queuedStore {
	return &queuedStore{count: map[limit.Key]int64{}, release: make(chan struct{})}
}

func (q *queuedStore) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	q.calls.Add(1)
	q.done.Add(1)
	defer q.done.Done()
	q.mu.Lock()
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		q.count[t.Key] += t.Cost
		c := q.count[t.Key]
		res[i] = limit.Result{Allowed: c <= t.Limit, Limit: t.Limit, Count: c, Remaining: max(0, t.Limit-c), Spent: true}
	}
	q.mu.Unlock()
	select {
	case <-q.release:
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-guard.GiveUp(ctx): // the inline wait gave up on it
		return nil, context.Canceled
	}
}

func (q *queuedStore) Refund(context.Context, []limit.Take) error { return nil }

// overloadFallback is a Fallback with a tiny timeout, so that every reply
// of a queuedStore is late.
func overloadFallback(st limit.Counter, ceiling time.Duration) *resilience.Fallback {
	return resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Microsecond, Ceiling: ceiling,
		Breaker: resilience.BreakerOptions{Failures: 1}})
}

var openTake = limit.Take{Key: limit.Key{Space: "lim", ID: "k", Name: "fw"}, Algorithm: limit.FixedWindow,
	Limit: 10, Window: time.Minute, Cost: 1, Policy: "limits.api", OnStoreError: limit.FallbackOpen}

// TestLateReplyFromHealthyRedisIsWaitedFor: while the probe vouches for
// Redis, a reply past the timeout is the decision (exact, from Redis), not
// a fallback decision, and the breaker does not hear of it.
func TestLateReplyFromHealthyRedisIsWaitedFor(t *testing.T) {
	forEachWait(t, testLateReplyFromHealthyRedisIsWaitedFor)
}

func testLateReplyFromHealthyRedisIsWaitedFor(t *testing.T, st *queuedStore, counter limit.Counter) {
	f := overloadFallback(counter, time.Minute)
	f.ObserveProbe(context.Background(), nil)

	type answer struct {
		res []limit.Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := f.Take(context.Background(), []limit.Take{openTake})
		got <- answer{res, err}
	}()
	// The timeout (1µs) passes while the reply is held.
	time.Sleep(20 * time.Millisecond)
	close(st.release)
	a := <-got
	if a.err != nil {
		t.Fatalf("Take: %v, want the late reply", a.err)
	}
	if a.res[0].Fallback || a.res[0].Count != 1 {
		t.Errorf("result %+v, want Redis's count 1, not a fallback decision", a.res[0])
	}
	if f.Late() != 1 {
		t.Errorf("late replies = %d, want 1 (the reply came past the timeout)", f.Late())
	}
	s := f.Status()
	if s.Breaker != "closed" || len(s.InFallback()) != 0 {
		t.Errorf("breaker %s, in fallback %v: want closed and none, a busy host is not a dead Redis", s.Breaker, s.InFallback())
	}
}

// TestLateReplyWithoutProbeIsAStoreFailure: the same late reply, with the
// probe failing, is a store failure: the fallback decides and the breaker
// counts it. (This is what the rule above changes.)
func TestLateReplyWithoutProbeIsAStoreFailure(t *testing.T) {
	forEachWait(t, testLateReplyWithoutProbeIsAStoreFailure)
}

func testLateReplyWithoutProbeIsAStoreFailure(t *testing.T, st *queuedStore, counter limit.Counter) {
	f := overloadFallback(counter, time.Minute)
	f.ObserveProbe(context.Background(), errors.New("dial tcp: connection refused"))

	res, err := f.Take(context.Background(), []limit.Take{openTake})
	if err != nil {
		t.Fatalf("Take: %v, want a fallback decision (open)", err)
	}
	if !res[0].Fallback {
		t.Errorf("result %+v, want a fallback decision", res[0])
	}
	if got := f.Status().Breaker; got != "open" {
		t.Errorf("breaker %s, want open (Failures: 1)", got)
	}
	// The abandoned call answers now, after its decision was taken from
	// memory: the result the caller holds stays the fallback's.
	close(st.release)
	st.done.Wait()
	if res[0].Count != 1 || !res[0].Fallback {
		t.Errorf("the fallback result changed under the late reply: %+v", res[0])
	}
}

// TestNoReplyFromHealthyRedisIsShed: a call that outlives the ceiling while
// the probe vouches for Redis is shed as overloaded: no fallback decision,
// no breaker failure.
func TestNoReplyFromHealthyRedisIsShed(t *testing.T) {
	forEachWait(t, testNoReplyFromHealthyRedisIsShed)
}

func testNoReplyFromHealthyRedisIsShed(t *testing.T, st *queuedStore, counter limit.Counter) {
	defer st.done.Wait() // never released: the call ends at the ceiling
	f := overloadFallback(counter, 30*time.Millisecond)
	stop := keepVouching(f)
	defer stop()

	lim := limit.New(map[string]limit.Policy{
		"api": {Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, OnStoreError: limit.FallbackOpen},
	}, f, nil)
	_, err := lim.Check(context.Background(), []limit.Check{{Policy: "api", Key: "user:1", Cost: 1}})
	if code := problem.CodeOf(err); code != problem.CodeOverloaded {
		t.Fatalf("Check: code %q (%v), want overloaded", code, err)
	}
	if f.Shed() != 1 {
		t.Errorf("shed = %d, want 1", f.Shed())
	}
	s := f.Status()
	if s.Breaker != "closed" || len(s.InFallback()) != 0 {
		t.Errorf("breaker %s, in fallback %v: want closed and none", s.Breaker, s.InFallback())
	}
}

// keepVouching reports a good probe every few milliseconds until stop.
func keepVouching(f *resilience.Fallback) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.ObserveProbe(ctx, nil)
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f.ObserveProbe(ctx, nil)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// TestProbeEndsTheOutage: while the breaker is not closed no decision
// touches the store (only the probe tries Redis), and a good probe in
// half-open closes it by warming the decision pool (Warm), so the first
// decision after an outage needs no dial.
func TestProbeEndsTheOutage(t *testing.T) {
	st := guardtest.NewOutageStore()
	var warmed atomic.Int64
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Timeout: time.Second,
		Breaker: resilience.BreakerOptions{Failures: 1, OpenFor: 100 * time.Millisecond},
		Warm:    func(context.Context) error { warmed.Add(1); return nil }})
	ctx := context.Background()
	f.ObserveProbe(ctx, errRedisDown) // Failures: 1 opens it
	if got := f.Status().Breaker; got != "open" {
		t.Fatalf("breaker %s after a failed probe, want open", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Status().Breaker != "half-open" {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never went half-open")
		}
		time.Sleep(time.Millisecond)
	}
	f.ObserveProbe(ctx, errRedisDown)
	if got := f.Status().Breaker; got != "open" {
		t.Fatalf("breaker %s after a failed probe while half-open, want open again", got)
	}
	for f.Status().Breaker != "half-open" {
		if time.Now().After(deadline) {
			t.Fatal("the breaker never went half-open again")
		}
		time.Sleep(time.Millisecond)
	}
	before := st.Calls()
	for range 5 {
		res, err := f.Take(ctx, []limit.Take{openTake})
		if err != nil || !res[0].Fallback {
			t.Fatalf("Take while half-open: %+v, %v; want a fallback decision", res, err)
		}
	}
	if n := st.Calls() - before; n != 0 {
		t.Errorf("decisions made %d store calls while half-open, want 0: only the probe tries Redis", n)
	}
	f.ObserveProbe(ctx, nil)
	if got := f.Status().Breaker; got != "closed" || warmed.Load() != 1 {
		t.Fatalf("after a good probe: breaker %s, warmed %d times; want closed, 1", got, warmed.Load())
	}
	res, err := f.Take(ctx, []limit.Take{openTake})
	if err != nil || res[0].Fallback {
		t.Errorf("first decision after the outage: %+v, %v; want it from the store", res, err)
	}
}

// TestDoMakesNoCallWhileOpen: what decides nothing (the conversion watch,
// the block index) goes through Do, which touches no connection while the
// breaker is open.
func TestDoMakesNoCallWhileOpen(t *testing.T) {
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: guardtest.NewOutageStore(), Timeout: time.Second,
		Breaker: resilience.BreakerOptions{Failures: 1, OpenFor: time.Hour}})
	f.ObserveProbe(context.Background(), errRedisDown)
	var calls int
	err := f.Do(context.Background(), func(context.Context) error { calls++; return nil })
	if !errors.Is(err, limit.ErrStoreUnavailable) || calls != 0 {
		t.Errorf("Do while open: err %v, %d calls; want ErrStoreUnavailable and no call", err, calls)
	}
}

// TestTimedOutProbeWhileCallsAnswer: on a saturated host the probe's ping
// misses its deadline while Redis answers every call. Replies to calls
// then vouch for Redis: a late reply is the decision, the breaker hears of
// nothing; so do up to two late pings in a row with nothing answered (a
// stall of this process). A refused ping, or three late pings in a row
// with no reply to any call, make a late reply a store failure.
func TestTimedOutProbeWhileCallsAnswer(t *testing.T) {
	for _, tc := range []timedOutProbeCase{
		{"timeout, calls answer", true, context.DeadlineExceeded, 1, true},
		{"two timeouts, no call answered", false, context.DeadlineExceeded, 2, true},
		{"three timeouts, no call answered", false, context.DeadlineExceeded, 3, false},
		{"refused, calls answer", true, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachWait(t, tc.run)
		})
	}
}

type timedOutProbeCase struct {
	name      string
	firstCall bool // a call got its reply before the probe's verdicts
	probeErr  error
	pings     int // verdicts with probeErr in a row
	wantExact bool
}

func (tc timedOutProbeCase) run(t *testing.T, st *queuedStore, counter limit.Counter) {
	f := overloadFallback(counter, time.Minute)
	f.ObserveProbe(context.Background(), nil)
	if tc.firstCall {
		go func() { st.release <- struct{}{} }()
		if _, err := f.Take(context.Background(), []limit.Take{openTake}); err != nil {
			t.Fatalf("first Take: %v", err)
		}
	}
	for range tc.pings {
		f.ObserveProbe(context.Background(), tc.probeErr)
	}
	checkLateReply(t, f, st, tc.wantExact)
}

// checkLateReply takes once through f, st replying past f's 1µs timeout,
// and checks the decision: exact, from the store, with the breaker closed
// (Redis vouched for), or a fallback decision with it open.
func checkLateReply(t *testing.T, f *resilience.Fallback, st *queuedStore, wantExact bool) {
	t.Helper()
	go func() {
		time.Sleep(20 * time.Millisecond) // past the 1µs timeout
		close(st.release)
	}()
	res, err := f.Take(context.Background(), []limit.Take{openTake})
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if res[0].Fallback == wantExact {
		t.Errorf("fallback decision = %v, want %v", res[0].Fallback, !wantExact)
	}
	if got, want := f.Status().Breaker, map[bool]string{true: "closed", false: "open"}[wantExact]; got != want {
		t.Errorf("breaker %s, want %s", got, want)
	}
	st.done.Wait()
}
