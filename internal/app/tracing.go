package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/httpapi"
)

// tracesFlushTimeout bounds the last export at Close: a collector that is
// gone must not hold the shutdown up.
const tracesFlushTimeout = 5 * time.Second

// WithTracerProvider traces through tp, whatever the OTEL_* variables say
// (tests give an SDK provider with an in-memory exporter). The App does not
// shut it down.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// tracing is the service's tracer provider and propagator; a nil *tracing
// is tracing off, and every method is then a no-op.
type tracing struct {
	tp      trace.TracerProvider
	prop    propagation.TextMapPropagator
	trusted []netip.Prefix // whose sampled flag counts (httpapi.Traced)
}

// startTracing sets tracing up as cfg.Tracing says, or with the provider
// WithTracerProvider gave; nil when off. Close shuts the provider it made
// down, flushing the spans still queued (for at most tracesFlushTimeout).
// It sets no global provider: every instrumentation is handed this one,
// so that several Apps in one test process stay apart.
func startTracing(ctx context.Context, cfg *config.Config, o *options, log *slog.Logger, onClose func(func())) (*tracing, error) {
	// W3C trace context and baggage, from callers and to the SMS provider.
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	if o.tracerProvider != nil {
		return &tracing{tp: o.tracerProvider, prop: prop, trusted: cfg.TrustedProxies}, nil
	}
	if !cfg.Tracing.Enabled {
		return nil, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	// Each exporter reads OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,HEADERS,
	// TIMEOUT,COMPRESSION,CERTIFICATE,INSECURE} itself. Neither connects
	// here: a collector that is down costs dropped spans, never the start.
	switch cfg.Tracing.Protocol {
	case config.OTLPGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	// service.name is "otpguard" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise (WithFromEnv comes last).
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "otpguard")), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The sampler is OTEL_TRACES_SAMPLER's (checked by otelEnv.tracing),
	// but an untrusted caller's sampled flag does not decide it
	// (sampler.go); the batching comes from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(newSampler(cfg.Tracing)))
	// The SDK reports failed exports through one handler per process, like
	// go-redis's logger: the last App's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", "err", err)
	}))
	onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracesFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans lost at shutdown", "err", err, "flush_timeout", tracesFlushTimeout.String())
		}
	})
	log.Info("tracing on", "exporter", "otlp", "protocol", cfg.Tracing.Protocol, "endpoint", cfg.Tracing.EndpointLabel(),
		"sampler", cfg.Tracing.Sampler)
	return &tracing{tp: tp, prop: prop, trusted: cfg.TrustedProxies}, nil
}

// handler wraps the service's handler in a server span per request
// (httpapi.Traced).
func (t *tracing) handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return httpapi.Traced(h, t.tp, t.prop, t.trusted)
}

// instrumentRedis adds go-redis's own tracing hook (redisotel) to rdb: a
// client span per command ("evalsha") or pipeline and transaction
// ("redis.pipeline multi incr expire exec"). Add it before any hook that
// answers commands itself (store.Coalesce), so that each caller's command
// has its own span. The commands' arguments are not recorded
// (WithDBStatement(false)): otpguard's keys hold full phone numbers.
func (t *tracing) instrumentRedis(rdb redis.UniversalClient) error {
	if t == nil {
		return nil
	}
	err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(childSpans{tp: t.tp}),
		redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
	if err != nil {
		return fmt.Errorf("tracing: redis: %w", err)
	}
	return nil
}

// sqlTracer is what the SQL store traces with (sqlstore.Options).
func (t *tracing) sqlTracer() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return childSpans{tp: t.tp}
}

// smsTransport carries the Twilio sender's calls: a client span per call,
// and the trace context passed on as W3C traceparent. nil: the default.
func (t *tracing) smsTransport() http.RoundTripper {
	if t == nil {
		return nil
	}
	return otelhttp.NewTransport(http.DefaultTransport,
		otelhttp.WithTracerProvider(t.tp), otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "sms " + r.Method }))
}

// childSpans is tp, but starts spans only inside a trace: a Redis or SQL
// call made for a request is a child of its span, while the background
// jobs (heartbeat, breaker probe, deny-list refresh, audit flush, hot-key
// sync, coalesced pipelines) would start a new trace every few seconds
// and are left out.
type childSpans struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p childSpans) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{t: p.tp.Tracer(name, opts...)}
}

type childTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// The non-recording span ctx holds: no trace, nothing recorded.
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}
