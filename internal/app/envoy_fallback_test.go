package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestEnvoyFallbackDecisionsCounted: an Envoy rule has its series in
// otpguard_fallback_decisions_total, at zero from the start, and each of
// its decisions taken without Redis counts there, as a policy file's do.
func TestEnvoyFallbackDecisionsCounted(t *testing.T) {
	dir := t.TempDir()
	writeEnvoyRules(t, filepath.Join(dir, "rules.yaml"),
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 100}\n")
	env := map[string]string{"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_ADDR": "127.0.0.1:0",
		"OTPGUARD_GRPC_ADDR": "127.0.0.1:0", "OTPGUARD_ENVOY_CONFIG": dir,
		// Nothing listens there: every decision is the fallback's.
		"OTPGUARD_REDIS_URL": redistest.RefusedURL(t), "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef",
		"OTPGUARD_API_KEYS": "envoy-fallback-key-0123456789", "OTPGUARD_OPS_KEYS": "envoy-fallback-ops-0123456789",
		"OTPGUARD_SMS": "console", "OTPGUARD_HTTP_SERVER": "net/http"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, WithOutput(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	metric := func() string {
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		for _, line := range strings.Split(w.Body.String(), "\n") {
			if strings.HasPrefix(line, `otpguard_fallback_decisions_total{policy="d.k"} `) {
				return line
			}
		}
		return "(none)"
	}
	if got, want := metric(), `otpguard_fallback_decisions_total{policy="d.k"} 0`; got != want {
		t.Errorf("before any decision: %s, want %s", got, want)
	}

	c := envoyClient(t, a)
	const asks = 3
	for i := range asks {
		req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
		got, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil || got.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("ask %d with Redis refused (rules are open): %v %v, want OK", i, got, err)
		}
	}
	if got, want := metric(), `otpguard_fallback_decisions_total{policy="d.k"} 3`; got != want {
		t.Errorf("after %d decisions without Redis: %s, want %s", asks, got, want)
	}
}
