package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkHandlerCheckTracing is the cost of tracing per decision: one
// POST /limits/check through the whole handler (BenchmarkHandlerCheck,
// batch=1) with tracing off, on with every request sampled into the SDK's
// batch processor and an exporter that drops the spans (everything but the
// network to a collector), and on with every request sampled out. Besides
// ns/op (wall time, mostly the Redis round trip) it reports cpu-ns/op:
// this process's CPU (user+system, getrusage) per decision; Redis runs
// in another process and is not counted.
//
//	go test -run '^$' -bench HandlerCheckTracing -benchtime 20000x -count 5 ./cmd/otpguard-load/
func BenchmarkHandlerCheckTracing(b *testing.B) {
	for _, mode := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{"off", nil},
		{"sampled", sdktrace.AlwaysSample()},
		{"unsampled", sdktrace.NeverSample()},
	} {
		b.Run("tracing="+mode.name, func(b *testing.B) {
			var opts []app.Option
			if mode.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(mode.sampler), sdktrace.WithBatcher(discard{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts = append(opts, app.WithTracerProvider(tp))
			}
			h := tracingBenchHandler(b, opts...)
			c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: 1}
			hdr := http.Header{"Authorization": {"Bearer " + benchKey}, "Content-Type": {"application/json"}}
			i := uint64(0)
			var cpu0 time.Duration
			for b.Loop() {
				if i == 0 {
					cpu0 = processCPU()
				}
				req := httptest.NewRequest(http.MethodPost, "/limits/check", strings.NewReader(string(c.body(i))))
				req.Header = hdr.Clone()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("request %d: %d %s", i, w.Code, w.Body)
				}
				i++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// tracingBenchHandler is benchHandler's service, with opts.
func tracingBenchHandler(b *testing.B, opts ...app.Option) http.Handler {
	b.Helper()
	tg := redistest.New(b)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": benchKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": b.TempDir(), "OTPGUARD_LOG_LEVEL": "warn",
	}
	cfg, err := app.LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		b.Fatal(err)
	}
	cfg.Policies.Limits = map[string]guard.LimitPolicy{
		"api": {Algorithm: guard.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000, OnStoreError: guard.FallbackOpen},
	}
	cfg.Policies.FillDefaults()
	a, err := app.New(context.Background(), cfg, append([]app.Option{app.WithOutput(io.Discard)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a.Handler()
}
