package envoy_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
)

// limiterFunc is a hand-written fake of envoy.Limiter.
type limiterFunc func(ctx context.Context, checks []limit.Check) (limit.Batch, error)

func (f limiterFunc) Check(ctx context.Context, checks []limit.Check) (limit.Batch, error) {
	return f(ctx, checks)
}

// TestAllocationsPerCall holds the service's own work per call (matching,
// the counter's key, the answer, its metrics) to a count of allocations:
// at thousands of calls a second each one is collector work. The limiter
// is a fake that allocates nothing, so the count is the service's (its
// admission's included).
func TestAllocationsPerCall(t *testing.T) {
	decided := []limit.Decision{{Allowed: true, WouldAllow: true, Mode: limit.ModeExact, Remaining: 49}}
	lim := limiterFunc(func(_ context.Context, checks []limit.Check) (limit.Batch, error) {
		if len(checks) != 1 || checks[0].Key == "" {
			t.Errorf("checks %+v, want one with a key", checks)
		}
		return limit.Batch{Allowed: true, Decisions: decided}, nil
	})
	// With the admission otpguard runs it with: taking a slot costs none.
	svc := envoy.NewService(rulesOf(t, basicYAML), lim, envoy.Options{Metrics: envoy.NewMetrics(prometheus.NewRegistry()),
		Admission: httpapi.NewAdmission(256, metrics.New())})
	req := request("basic", [][][2]string{{{"key1", "user_123"}}}, 0)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		resp, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || len(resp.Statuses) != 1 || resp.Statuses[0].LimitRemaining != 49 {
			t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
		}
	})
	// items, checks, the key with its window, and the answer (response,
	// statuses, their pointers, durations); the limiter's decisions are
	// used as they are.
	const want = 7
	if allocs > want {
		t.Errorf("got %.0f allocations per call, want at most %d", allocs, want)
	}
	t.Logf("%.0f allocations per call", allocs)
}
