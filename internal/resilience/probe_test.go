package resilience_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/resilience"
)

// TestProbeWaitsOutALatePing: on a saturated host every ping may come
// back past the probe's timeout. Each such ping is a late verdict at the
// timeout and then, answered, vouches for Redis: five such rounds in a
// row leave Redis vouched for (a late reply to a call is the decision)
// and the breaker closed, where five pings given up at the timeout would
// have stopped the vouching and opened it. A ping that is never answered
// (a black hole) still stops the vouching and opens the breaker.
func TestProbeWaitsOutALatePing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		every     time.Duration // the probe's rounds
		ping      func(ctx context.Context) error
		rounds    int
		wantExact bool
	}{
		{"late, then answered", time.Hour, func(ctx context.Context) error {
			select {
			case <-time.After(30 * time.Millisecond): // past the 1ms timeout
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, 5, true},
		{"never answered", 5 * time.Millisecond, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newQueuedStore()
			f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Microsecond, Ceiling: time.Minute,
				ProbeEvery: tc.every, ProbeTimeout: time.Millisecond, Breaker: resilience.BreakerOptions{Failures: 1}})
			f.ObserveProbe(context.Background(), nil)
			for range tc.rounds {
				f.Probe(context.Background(), tc.ping)
			}
			checkLateReply(t, f, st, tc.wantExact)
		})
	}
}
