package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/otpguard/otpguard/internal/app"
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
	for _, mode := range tracingModes {
		b.Run("tracing="+mode.name, func(b *testing.B) {
			opts, _ := mode.options(b)
			h, _ := benchHandler(b, opts...)
			c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: 1}
			i := uint64(0)
			var cpu0 time.Duration
			for b.Loop() {
				if i == 0 {
					cpu0 = processCPU()
				}
				if w := postCheck(h, c, i); w.Code != http.StatusOK {
					b.Fatalf("request %d: %d %s", i, w.Code, w.Body)
				}
				i++
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// tracingMode is one way BenchmarkHandlerCheckTracing runs the service.
type tracingMode struct {
	name    string
	sampler sdktrace.Sampler // nil: tracing off
}

var tracingModes = []tracingMode{
	{"off", nil},
	{"sampled", sdktrace.AlwaysSample()},
	{"unsampled", sdktrace.NeverSample()},
}

// options are the app.New options of m: a tracer provider with m's sampler
// and a batch processor into a discard exporter, shut down with tb. The
// exporter is returned so that a test can see what reached it (nil when
// tracing is off).
func (m tracingMode) options(tb testing.TB) ([]app.Option, *discard) {
	if m.sampler == nil {
		return nil, nil
	}
	d := &discard{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(m.sampler), sdktrace.WithBatcher(d))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	d.flush = tp.ForceFlush
	return []app.Option{app.WithTracerProvider(tp)}, d
}

// discard is a span exporter that drops what it is given, counting it.
type discard struct {
	spans atomic.Int64
	flush func(context.Context) error // the provider's ForceFlush
}

func (d *discard) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(spans)))
	return nil
}

func (*discard) Shutdown(context.Context) error { return nil }
