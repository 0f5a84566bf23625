package resilience_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
)

// heldSendStore is a SendCounter whose TakeSend counts at once and holds
// its reply until its context ends, as go-redis holds a MULTI/EXEC that
// Redis does not answer: it cannot be abandoned (no Abandoner), and never
// looks at guard.GiveUp. It records the goroutine it ran on.
type heldSendStore struct {
	*queuedStore
	ran      atomic.Int64 // goroutine of the last TakeSend
	returned atomic.Bool  // the last TakeSend has returned
	started  chan struct{}
}

func (h *heldSendStore) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	h.ran.Store(int64(goroutineID()))
	h.returned.Store(false)
	defer h.returned.Store(true)
	h.calls.Add(1)
	close(h.started)
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

// TestSendTimedOutOnTheCallersGoroutine: a send's store call (TakeSend,
// a MULTI/EXEC) runs on the caller's goroutine and, when Redis does not
// answer, gets the verdicts a call on a worker got: the fallback decides
// when the probe does not vouch for Redis at the timeout (begun unvouched)
// or at the ceiling (stopped vouching meanwhile); the call is shed when
// the probe still vouches at the ceiling. Either way the store call has
// returned when TakeSend does: nothing of it runs on.
func TestSendTimedOutOnTheCallersGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   error // the probe's verdict before the send
		meantime error // reported once the call is under way (nil: keep vouching)
		wantShed bool
	}{
		{"not vouched for: the timeout, then the fallback", errRedisDown, errRedisDown, false},
		{"stops vouching meanwhile: the ceiling, then the fallback", nil, errRedisDown, false},
		{"vouched for throughout: shed at the ceiling", nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &heldSendStore{queuedStore: newQueuedStore(), started: make(chan struct{})}
			f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Millisecond,
				Ceiling: 50 * time.Millisecond, Breaker: resilience.BreakerOptions{Failures: 100}})
			f.ObserveProbe(context.Background(), tc.before)
			go func() {
				<-st.started
				f.ObserveProbe(context.Background(), tc.meantime)
			}()
			vol := &guard.VolumeTake{Key: limit.Key{Space: "otp", ID: "IN", Name: "vol"}}
			res, vr, err := f.TakeSend(context.Background(), []limit.Take{openTake}, vol)
			if got := st.ran.Load(); got != int64(goroutineID()) {
				t.Errorf("TakeSend ran on goroutine %d, want the caller's %d", got, goroutineID())
			}
			if !st.returned.Load() {
				t.Error("the store call was still running when TakeSend returned")
			}
			if tc.wantShed {
				if !errors.Is(err, problem.ErrOverloaded) || f.Shed() != 1 {
					t.Fatalf("TakeSend: %v (shed %d), want ErrOverloaded and shed 1", err, f.Shed())
				}
				return
			}
			if err != nil || len(res) != 1 || !res[0].Fallback || vr != nil {
				t.Fatalf("TakeSend: %+v, %v, %v; want one fallback decision (open) and no volume result", res, vr, err)
			}
			if f.Shed() != 0 {
				t.Errorf("shed %d, want 0", f.Shed())
			}
		})
	}
}
