package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/httpapi"
)

// TestUntrustedCallersCannotForceSampling: a traceparent with the sampled
// flag decides the sampling only when it comes from a trusted proxy;
// from anyone else, otpguard's own sampler decides (here: sample nothing),
// though the span still joins the caller's trace.
func TestUntrustedCallersCannotForceSampling(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name, sampler, peer string
		ratio               float64
		sampled             bool
	}{
		{"parent based, untrusted peer", "parentbased_always_off", "203.0.113.9:4000", 0, false},
		{"parent based, trusted peer", "parentbased_always_off", "10.1.2.3:4000", 0, true},
		{"ratio 0, untrusted peer", "parentbased_traceidratio", "203.0.113.9:4000", 0, false},
		{"ratio 1, untrusted peer: joins the trace", "parentbased_traceidratio", "203.0.113.9:4000", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
				sdktrace.WithSampler(newSampler(config.TracingConfig{Sampler: tc.sampler, Ratio: tc.ratio})))
			defer func() {
				if err := tp.Shutdown(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			h := httpapi.Traced(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), tp, propagation.TraceContext{}, trusted)
			req := httptest.NewRequest("GET", "/otp/verifications/x", nil)
			req.RemoteAddr = tc.peer
			req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
			h.ServeHTTP(httptest.NewRecorder(), req)
			spans := exp.GetSpans()
			if got := len(spans) == 1; got != tc.sampled {
				t.Fatalf("%d spans exported, want sampled %v", len(spans), tc.sampled)
			}
			if tc.sampled && spans[0].SpanContext.TraceID().String() != traceID {
				t.Errorf("span in trace %s, want the caller's %s", spans[0].SpanContext.TraceID(), traceID)
			}
		})
	}
}
