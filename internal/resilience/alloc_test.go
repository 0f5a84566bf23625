package resilience_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// TestTakeAllocations holds a check's way through the Fallback to the
// store, waited for on the caller's goroutine (an Abandoner), to a count of
// allocations: at 10,000 checks a second each one is collector work. The
// store is quickStore, which makes its results (one allocation).
func TestTakeAllocations(t *testing.T) {
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: &quickStore{abandons: true}, Timeout: time.Minute})
	f.ObserveProbe(context.Background(), nil)
	ctx, cancel := context.WithCancel(context.Background()) // a request's, cancellable
	defer cancel()
	takes := []limit.Take{openTake}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := f.Take(ctx, takes); err != nil {
			t.Fatal(err)
		}
	})
	// the store's results; the call's closure and what it writes (got);
	// the breaker's done func (gobreaker); the call's context (inlineCtx)
	const want = 5
	if allocs > want {
		t.Errorf("got %.0f allocations per Take, want at most %d", allocs, want)
	}
	t.Logf("%.0f allocations per Take", allocs)
}
