package app

import (
	"crypto/rand"
	"strings"

	"github.com/otpguard/otpguard/internal/config"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/internal/httpapi"
)

// newSampler is OTEL_TRACES_SAMPLER[_ARG] as the SDK builds it from the
// environment, behind peerSampler.
func newSampler(t config.TracingConfig) sdktrace.Sampler {
	var root sdktrace.Sampler
	switch strings.TrimPrefix(t.Sampler, "parentbased_") {
	case "always_off":
		root = sdktrace.NeverSample()
	case "traceidratio":
		root = sdktrace.TraceIDRatioBased(t.Ratio)
	default:
		root = sdktrace.AlwaysSample()
	}
	if strings.HasPrefix(t.Sampler, "parentbased_") {
		return peerSampler{inner: sdktrace.ParentBased(root)}
	}
	return peerSampler{inner: root}
}

// peerSampler keeps a caller that is no trusted proxy from forcing the
// sampling: its remote parent's sampled flag is ignored, and the decision
// is taken as for a new trace on a random trace ID (the caller chooses its
// trace ID, so a ratio judged on it would be the caller's choice too). The
// span still joins the caller's trace.
type peerSampler struct{ inner sdktrace.Sampler }

// ShouldSample implements sdktrace.Sampler.
func (s peerSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	if psc.IsValid() && psc.IsRemote() && !httpapi.TrustedPeer(p.ParentContext) {
		p.ParentContext = trace.ContextWithSpanContext(p.ParentContext, trace.SpanContext{})
		_, _ = rand.Read(p.TraceID[:])
	}
	return s.inner.ShouldSample(p)
}

// Description implements sdktrace.Sampler.
func (s peerSampler) Description() string { return "PeerSampler{" + s.inner.Description() + "}" }
