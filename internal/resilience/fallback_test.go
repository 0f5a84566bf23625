package resilience_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

var errRedisDown = guardtest.ErrRedisDown

func outageTake(id string, lim int64, mode limit.FallbackMode, local int64) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:p", ID: id, Name: "fw"}, Algorithm: limit.FixedWindow,
		Limit: lim, Window: time.Minute, Cost: 1, Policy: "limits.p", OnStoreError: mode, LocalLimit: local}
}

// fallbackAllowed takes t n times and counts the allowed.
func fallbackAllowed(t *testing.T, c limit.Counter, tk limit.Take, n int) int {
	t.Helper()
	allowed := 0
	for range n {
		res, err := c.Take(context.Background(), []limit.Take{tk})
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		if !res[0].Fallback {
			t.Fatalf("Take: decided by the store, want the fallback")
		}
		if res[0].Allowed {
			allowed++
		}
	}
	return allowed
}

func TestFallbackModes(t *testing.T) {
	tests := []struct {
		name      string
		take      limit.Take
		instances int
		want      int // allowed of 100
	}{
		{name: "local uses local_limit", take: outageTake("a", 50, limit.FallbackLocal, 3), instances: 4, want: 3},
		{name: "open splits the limit", take: outageTake("b", 50, limit.FallbackOpen, 0), instances: 4, want: 12},
		{name: "open with one instance", take: outageTake("c", 50, limit.FallbackOpen, 0), instances: 1, want: 50},
		{name: "open rounds down to at least 1", take: outageTake("d", 3, limit.FallbackOpen, 0), instances: 5, want: 1},
		{name: "open with no instance count", take: outageTake("e", 7, limit.FallbackOpen, 0), instances: 0, want: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := guardtest.NewOutageStore()
			st.SetDown(true)
			f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Instances: func() int { return tc.instances }})
			if got := fallbackAllowed(t, f, tc.take, 100); got != tc.want {
				t.Errorf("allowed: got %d of 100, want %d", got, tc.want)
			}
		})
	}
}

func TestFallbackClosedFails(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st})
	for _, mode := range []limit.FallbackMode{limit.FallbackClosed, ""} {
		_, err := f.Take(context.Background(), []limit.Take{outageTake("a", 5, limit.FallbackOpen, 0), outageTake("b", 5, mode, 0)})
		if err == nil {
			t.Errorf("mode %q: a batch holding a closed take got decisions, want an error", mode)
		}
	}
}

func TestFallbackTokenBucket(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Instances: func() int { return 2 }, Now: func() time.Time { return now }})
	tk := limit.Take{Key: limit.Key{Space: "lim:b", ID: "k", Name: "tb"}, Algorithm: limit.TokenBucket,
		Limit: 10, Rate: 2, Cost: 1, OnStoreError: limit.FallbackOpen}
	if got := fallbackAllowed(t, f, tk, 20); got != 5 {
		t.Fatalf("burst: got %d, want capacity/N = 5", got)
	}
	now = now.Add(time.Second) // the split bucket refills at rate/N = 1/s
	if got := fallbackAllowed(t, f, tk, 20); got != 1 {
		t.Errorf("after 1s: got %d, want 1", got)
	}
	res, err := f.Take(context.Background(), []limit.Take{tk})
	if err != nil || res[0].Allowed || res[0].RetryAfter != time.Second {
		t.Errorf("denied take: got %+v %v, want denied with retry after 1s", res, err)
	}
}

func TestFallbackFixedWindowExpires(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Now: func() time.Time { return now }})
	tk := outageTake("a", 10, limit.FallbackLocal, 2)
	if got := fallbackAllowed(t, f, tk, 5); got != 2 {
		t.Fatalf("got %d, want 2", got)
	}
	now = now.Add(time.Minute)
	if got := fallbackAllowed(t, f, tk, 5); got != 2 {
		t.Errorf("next window: got %d, want 2", got)
	}
}

func TestFallbackRefundGoesWhereCounted(t *testing.T) {
	st := guardtest.NewOutageStore()
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st})
	ctx := context.Background()
	tk := outageTake("a", 10, limit.FallbackLocal, 1)

	st.SetDown(true)
	res, err := f.Take(ctx, []limit.Take{tk})
	if err != nil || !res[0].Allowed || !res[0].Fallback {
		t.Fatalf("got %+v %v, want allowed by the fallback", res, err)
	}
	st.SetDown(false)
	before := st.Calls()
	local := tk
	local.Fallback = true
	if err := f.Refund(ctx, []limit.Take{local}); err != nil {
		t.Fatal(err)
	}
	if st.Calls() != before {
		t.Error("a refund of a fallback decision reached the store")
	}
	st.SetDown(true)
	if got := fallbackAllowed(t, f, tk, 3); got != 1 {
		t.Errorf("after the refund: got %d allowed, want local_limit 1 again", got)
	}
}

func TestFallbackBreaker(t *testing.T) {
	st := guardtest.NewOutageStore()
	const openFor = 300 * time.Millisecond
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Breaker: resilience.BreakerOptions{OpenFor: openFor}})
	ctx := context.Background()
	tk := outageTake("a", 1000, limit.FallbackOpen, 0)
	take := func() limit.Result {
		t.Helper()
		res, err := f.Take(ctx, []limit.Take{tk})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}

	// One failure among successes does not open it.
	st.SetDown(true)
	take()
	st.SetDown(false)
	for range 10 {
		if take().Fallback {
			t.Fatal("a healthy store's answer went to the fallback")
		}
	}
	if got := f.Status().Breaker; got != "closed" {
		t.Fatalf("after one failure: breaker %s, want closed", got)
	}

	// Consistent failure opens it: then the store is not called at all,
	// for OpenFor (the breaker's own clock): what a machine too busy to
	// keep pace decides after that is a probe, and is not held to it.
	st.SetDown(true)
	for range 4 {
		take()
	}
	opened := time.Now() // the breaker opens during the next take, no earlier
	take()
	if got := f.Status().Breaker; got != "open" && time.Since(opened) < openFor {
		t.Fatalf("after 5 failures: breaker %s, want open", got)
	}
	for range 100 {
		calls := st.Calls()
		r := take()
		if time.Since(opened) >= openFor {
			break
		}
		if !r.Fallback {
			t.Fatal("an open breaker's decision came from the store")
		}
		if got := st.Calls() - calls; got != 0 {
			t.Fatalf("open breaker: %d calls reached the store, want 0", got)
		}
	}

	// The store heals: after OpenFor one probe goes through and closes it.
	st.SetDown(false)
	time.Sleep(openFor + 50*time.Millisecond)
	if take().Fallback {
		t.Error("the probe's decision came from the fallback")
	}
	if got := f.Status().Breaker; got != "closed" {
		t.Errorf("after a good probe: breaker %s, want closed", got)
	}
}

func TestFallbackBreakerOpensOnFailureRatio(t *testing.T) {
	st := guardtest.NewOutageStore()
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st})
	tk := outageTake("a", 1000, limit.FallbackOpen, 0)
	for i := range 40 { // alternate: never 5 failures in a row, half of them failing
		st.SetDown(i%2 == 0)
		if _, err := f.Take(context.Background(), []limit.Take{tk}); err != nil {
			t.Fatal(err)
		}
		if f.Status().Breaker == "open" {
			if i+1 < 20 {
				t.Fatalf("opened after %d calls, before the minimum of 20", i+1)
			}
			return
		}
	}
	t.Error("a store failing every other call never opened the breaker")
}

// TestFallbackOneTimeoutPerDecision: once the store failed within a decision,
// the rest of the decision does not wait on it again.
func TestFallbackOneTimeoutPerDecision(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetWait(true)
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Timeout: 20 * time.Millisecond})
	p := guard.DefaultPolicies()
	p.OTP.OnStoreError, p.OTP.LocalLimit = limit.FallbackLocal, 1
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: f, Codes: f, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey})

	// Each call waits out its timeout: one call is one timeout (not timed:
	// BenchmarkOutageDecision measures it).
	if _, err := otp.Send(context.Background(), guard.SendRequest{Phone: "+14155550100", ClientIP: "203.0.113.7"}); err != nil {
		t.Fatalf("send: %v", err)
	}
	if got := st.Calls(); got != 1 {
		t.Errorf("store calls in one send (cooldown, number, address, save): got %d, want 1", got)
	}
}

func TestFallbackStatus(t *testing.T) {
	st := guardtest.NewOutageStore()
	p := guard.DefaultPolicies()
	p.Limits["p"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, OnStoreError: limit.FallbackLocal, LocalLimit: 1}
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Policies: &p, Instances: func() int { return 3 }})
	if got := f.Status().InFallback(); len(got) != 0 {
		t.Fatalf("in fallback before any failure: %v", got)
	}
	st.SetDown(true)
	fallbackAllowed(t, f, outageTake("a", 5, limit.FallbackLocal, 1), 1)
	s := f.Status()
	if got := s.InFallback(); len(got) != 1 || got[0] != "limits.p" {
		t.Errorf("in fallback: got %v, want [limits.p]", got)
	}
	if s.Instances != 3 || s.LastFailure.IsZero() || len(s.Policies) != 3 {
		t.Errorf("status: %+v", s)
	}
	st.SetDown(false)
	if _, err := f.Take(context.Background(), []limit.Take{outageTake("a", 5, limit.FallbackLocal, 1)}); err != nil {
		t.Fatal(err)
	}
	if got := f.Status().InFallback(); len(got) != 0 {
		t.Errorf("in fallback after recovery: %v", got)
	}
}

func TestLocalLimiterIsBounded(t *testing.T) {
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, MemoryKeys: 100, Breaker: resilience.BreakerOptions{Failures: 1}})
	for i := range 10_000 {
		if _, err := f.Take(context.Background(), []limit.Take{outageTake(fmt.Sprint("flood", i), 5, limit.FallbackOpen, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Status().MemoryKeys; got != 100 {
		t.Errorf("local counters after 10000 distinct keys: got %d, want the bound 100", got)
	}
}

// TestFallbackRefundStaysInItsWindow: a refund of a hit the fallback
// counted gives back in that hit's window only, not in one started since.
func TestFallbackRefundStaysInItsWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Now: func() time.Time { return now }})
	ctx := context.Background()
	tk := outageTake("w", 10, limit.FallbackLocal, 2)
	take := func() limit.Take {
		t.Helper()
		res, err := f.Take(ctx, []limit.Take{tk})
		if err != nil || !res[0].Allowed || !res[0].Fallback {
			t.Fatalf("got %+v %v, want allowed by the fallback", res, err)
		}
		back := tk
		back.Fallback, back.WindowID = true, res[0].WindowID
		return back
	}
	old := take()
	now = now.Add(time.Minute) // the window ends; the next hit starts another
	cur := take()
	if err := f.Refund(ctx, []limit.Take{old}); err != nil {
		t.Fatal(err)
	}
	if got := fallbackAllowed(t, f, tk, 5); got != 1 {
		t.Errorf("after refunding the ended window's hit: %d allowed, want 1 (the new window's hit kept)", got)
	}
	if err := f.Refund(ctx, []limit.Take{cur}); err != nil {
		t.Fatal(err)
	}
	if got := fallbackAllowed(t, f, tk, 5); got != 1 {
		t.Errorf("after refunding a hit of this window: %d allowed, want 1", got)
	}
}
