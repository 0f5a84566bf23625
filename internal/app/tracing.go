package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
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

	"github.com/otpguard/otpguard/internal/httpapi"
)

// The OTLP protocols the trace exporter speaks
// (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	otlpHTTP = "http/protobuf"
	otlpGRPC = "grpc"
)

// tracesFlushTimeout bounds the last export at Close: a collector that is
// gone must not hold the shutdown up.
const tracesFlushTimeout = 5 * time.Second

// TracingConfig is what the standard OTEL_* variables say about traces.
// Tracing is off unless they ask for it: OTEL_TRACES_EXPORTER=otlp, or an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with no exporter named;
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it off. The
// exporter, the sampler and the resource read the rest of their variables
// (endpoint, headers, timeout, OTEL_SERVICE_NAME, OTEL_BSP_*) themselves,
// from the process environment, as the OpenTelemetry specification says.
type TracingConfig struct {
	Enabled  bool
	Protocol string  // otlpHTTP or otlpGRPC
	Endpoint string  // as configured, for the start-up line; "" is the exporter's default
	Sampler  string  // OTEL_TRACES_SAMPLER, checked here (the SDK would only log a bad one)
	Ratio    float64 // OTEL_TRACES_SAMPLER_ARG of a traceidratio sampler (default 1)
}

// describe says where the traces go, for `otpguard config check`.
func (t TracingConfig) describe() string {
	if !t.Enabled {
		return "off"
	}
	return fmt.Sprintf("otlp %s to %s, sampler %s", t.Protocol, t.endpoint(), t.Sampler)
}

// endpoint is Endpoint for a log line: without a password, if it has one.
func (t TracingConfig) endpoint() string {
	switch {
	case t.Endpoint == "":
		return "the exporter's default endpoint"
	case strings.Contains(t.Endpoint, "://"):
		return redactURL(t.Endpoint)
	}
	return t.Endpoint
}

// samplers are the OTEL_TRACES_SAMPLER values the Go SDK knows, and
// whether each takes a ratio in OTEL_TRACES_SAMPLER_ARG.
var samplers = map[string]bool{
	"always_on": false, "always_off": false, "traceidratio": true,
	"parentbased_always_on": false, "parentbased_always_off": false, "parentbased_traceidratio": true,
}

// otelEnv is what the OTEL_* variables otpguard reads say, as given
// (settings.go); the exporter, the sampler and the resource read the rest
// themselves.
type otelEnv struct {
	sdkDisabled, exporter    string
	endpoint, tracesEndpoint string
	protocol, tracesProtocol string
	sampler, samplerArg      string
}

// tracing is what the variables mean together (see TracingConfig); it
// refuses what the service could not honour, and checks nothing of a
// tracing that stays off.
func (e otelEnv) tracing() (TracingConfig, error) {
	var t TracingConfig
	if strings.EqualFold(strings.TrimSpace(e.sdkDisabled), "true") {
		return t, nil
	}
	endpoint := or(e.tracesEndpoint, e.endpoint)
	switch exp := strings.TrimSpace(e.exporter); exp {
	case "none":
		return t, nil
	case "":
		if endpoint == "" {
			return t, nil
		}
	case "otlp":
	default:
		return t, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported: want otlp or none", exp)
	}
	t.Enabled, t.Endpoint = true, endpoint
	t.Protocol = or(or(e.tracesProtocol, e.protocol), otlpHTTP)
	if t.Protocol != otlpHTTP && t.Protocol != otlpGRPC {
		return t, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported: want http/protobuf or grpc", t.Protocol)
	}
	t.Sampler = or(e.sampler, "parentbased_always_on")
	ratio, known := samplers[t.Sampler]
	if !known {
		return t, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not supported: want always_on, always_off, traceidratio or a parentbased_ one", t.Sampler)
	}
	t.Ratio = 1
	if arg := e.samplerArg; ratio && arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return t, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio between 0 and 1", arg)
		}
		t.Ratio = r
	}
	return t, nil
}

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
func startTracing(ctx context.Context, cfg *Config, o *options, log *slog.Logger, onClose func(func())) (*tracing, error) {
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
	case otlpGRPC:
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
		sdktrace.WithSampler(cfg.Tracing.sampler()))
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
	log.Info("tracing on", "exporter", "otlp", "protocol", cfg.Tracing.Protocol, "endpoint", cfg.Tracing.endpoint(),
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
