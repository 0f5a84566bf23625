package envoy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// deepYAML is a domain whose rules nest as deep as any test asks: k0,
// k0.k1, ... each with a limit, so that every descriptor of keys k0..kN
// is decided.
func deepYAML(depth int) string {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	for i := range depth {
		pad := strings.Repeat("    ", i)
		fmt.Fprintf(&b, "%s  - key: k%d\n%s    rate_limit: {unit: minute, requests_per_unit: 1000}\n", pad, i, pad)
		if i < depth-1 {
			fmt.Fprintf(&b, "%s    descriptors:\n", pad)
		}
	}
	return b.String()
}

// descriptors is a request of n descriptors of entries entries each (keys
// k0, k1, ...), each descriptor a key of its own.
func descriptors(n, entries int) *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: "deep"}
	for i := range n {
		d := &commonv3.RateLimitDescriptor{}
		for j := range entries {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: fmt.Sprintf("k%d", j), Value: fmt.Sprint(i)})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestShouldRateLimitBounds: a request of more descriptors, or a
// descriptor of more entries, than the service accepts is refused with
// INVALID_ARGUMENT without a round trip to Redis; one at the bounds is
// decided. Round trips are counted on a real Redis.
func TestShouldRateLimitBounds(t *testing.T) {
	st, trips, _ := redistest.Store(t)
	rules := rulesOf(t, deepYAML(envoy.DefaultMaxEntries+1))
	byDefault := start(t, st, rules, envoy.Options{})
	small := start(t, st, rules, envoy.Options{MaxDescriptors: 3, MaxEntries: 2})
	for _, tc := range []struct {
		name     string
		in       *instance
		req      *pb.RateLimitRequest
		wantCode codes.Code
		trips    int64
	}{
		{"descriptors past the default", byDefault, descriptors(envoy.DefaultMaxDescriptors+1, 1), codes.InvalidArgument, 0},
		{"ten thousand descriptors", byDefault, descriptors(10_000, 1), codes.InvalidArgument, 0},
		{"entries past the default", byDefault, descriptors(1, envoy.DefaultMaxEntries+1), codes.InvalidArgument, 0},
		{"descriptors past the option", small, descriptors(4, 1), codes.InvalidArgument, 0},
		{"entries past the option", small, descriptors(1, 3), codes.InvalidArgument, 0},
		{"at the option's bounds", small, descriptors(3, 2), codes.OK, 1},
		{"at the default bounds", byDefault, descriptors(limit.MaxBatch, envoy.DefaultMaxEntries), codes.OK, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trips.Reset()
			_, err := tc.in.client.ShouldRateLimit(t.Context(), tc.req)
			if got := grpcstatus.Code(err); got != tc.wantCode {
				t.Errorf("ShouldRateLimit: %v, want code %v", err, tc.wantCode)
			}
			if n := trips.N(); n != tc.trips {
				t.Errorf("round trips = %d, want %d", n, tc.trips)
			}
		})
	}
}

// heldLimiter holds every Check until release is closed, saying on
// entered that one has begun.
type heldLimiter struct {
	entered chan struct{}
	release chan struct{}
}

func (l heldLimiter) Check(_ context.Context, checks []limit.Check) (limit.Batch, error) {
	l.entered <- struct{}{}
	<-l.release
	b := limit.Batch{Allowed: true, Decisions: make([]limit.Decision, len(checks))}
	for i, c := range checks {
		b.Decisions[i] = limit.Decision{Policy: c.Policy, Key: c.Key, Allowed: true, WouldAllow: true, Limit: 50, Remaining: 49}
	}
	return b, nil
}

// TestShouldRateLimitAdmission: each call takes a slot of the admission
// the service is given (the HTTP API's): with its one slot held by a
// call under way, the next is refused UNAVAILABLE without reaching the
// limiter, and counted as shed; once the first has answered, its slot is
// free again.
func TestShouldRateLimitAdmission(t *testing.T) {
	m := metrics.New()
	lim := heldLimiter{entered: make(chan struct{}, 4), release: make(chan struct{})}
	in := startWith(t, lim, rulesOf(t, basicYAML), envoy.Options{Admission: httpapi.NewAdmission(1, m)})
	req := request("basic", [][][2]string{{{"key1", "a"}}}, 1)

	first := make(chan error, 1)
	go func() { _, err := in.client.ShouldRateLimit(context.Background(), req); first <- err }()
	select {
	case <-lim.entered: // the first call holds the only slot, in the limiter
	case <-time.After(30 * time.Second):
		t.Fatal("the first call never reached the limiter")
	}
	// Bounded: a call that is let in waits for the held limiter.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := in.client.ShouldRateLimit(ctx, req)
	if grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("a call with the only slot taken: %v, want UNAVAILABLE", err)
	}
	if n := len(lim.entered); n != 0 {
		t.Errorf("the refused call reached the limiter (%d checks)", n)
	}
	shed := `otpguard_shed_total{route="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`
	if !strings.Contains(gathered(t, m), shed) {
		t.Errorf("metrics lack %s", shed)
	}

	close(lim.release)
	if err := <-first; err != nil {
		t.Fatalf("the held call: %v", err)
	}
	if _, err := in.client.ShouldRateLimit(t.Context(), req); err != nil {
		t.Errorf("a call once the slot is free: %v", err)
	}
}

// gathered is m's registry as /metrics shows it.
func gathered(t *testing.T, m *metrics.Set) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.Body.String()
}
