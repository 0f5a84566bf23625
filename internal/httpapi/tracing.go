package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// AttrCode is the span attribute holding a refused request's problem code
// ("phone_rate_limited", "store_unavailable", ...).
const AttrCode = attribute.Key("otpguard.code")

// untraced are the paths polled by machines, not asked by callers: a span
// for each probe and scrape would drown the traces worth reading.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// Traced wraps the server h in OpenTelemetry's net/http instrumentation
// (otelhttp): one server span per request, its parent taken from the
// caller's W3C traceparent (and baggage) through prop. The server's
// around middleware (traceEnd) names the span after the route and adds the
// refusal code. The probes and /metrics are not traced.
//
// A request from a peer in trusted (OTPGUARD_TRUSTED_PROXIES) is marked
// so (TrustedPeer): only such a caller's sampled flag may decide the
// sampling; anyone else's trace is joined but sampled as otpguard's own
// sampler decides (app's peerSampler).
func Traced(h http.Handler, tp trace.TracerProvider, prop propagation.TextMapPropagator, trusted []netip.Prefix) http.Handler {
	traced := otelhttp.NewHandler(h, "otpguard",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(prop),
		// Request metrics are Prometheus' job here (metrics.go).
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced[r.URL.Path] }),
		// Until the router has matched a route (traceEnd renames it):
		// never the path, which may hold a phone number.
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && slices.ContainsFunc(trusted, func(p netip.Prefix) bool {
			return p.Contains(ap.Addr().Unmap())
		}) {
			r = r.WithContext(context.WithValue(r.Context(), trustedPeerKey{}, true))
		}
		traced.ServeHTTP(w, r)
	})
}

type trustedPeerKey struct{}

// TrustedPeer reports whether ctx is a request's from a trusted proxy
// (Traced).
func TrustedPeer(ctx context.Context) bool {
	v, _ := ctx.Value(trustedPeerKey{}).(bool)
	return v
}

// traceStart and traceEnd, around each request (Server.around), complete
// the request's span, when there is one: the name "METHOD /route",
// http.route, the path with phone numbers masked (otelhttp records the raw
// path, and DELETE /ops/blocked/{phone} carries a full number), and the
// refusal code. traceStart gives the trace ID to the decisions' audit
// events (guard.WithTraceID), sampled or not, so that an event leads to the
// caller's trace. Without tracing they cost a context lookup.
// traceStart: ok when there is a span.
func traceStart(c echo.Context) (trace.Span, bool) {
	r := c.Request()
	span := trace.SpanFromContext(r.Context())
	sc := span.SpanContext()
	if !sc.IsValid() {
		return nil, false
	}
	c.SetRequest(r.WithContext(guard.WithTraceID(r.Context(), sc.TraceID().String())))
	return span, true
}

// traceEnd names the span and sets its attributes, after the handler
// (whose error was err).
func traceEnd(c echo.Context, span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	r := c.Request()
	if route := c.Path(); route != "" {
		span.SetName(r.Method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	// The path as its route has it, each parameter masked (tracePath),
	// and the client as the trusted-proxy rule names it (otelhttp
	// takes any X-Forwarded-For at its word).
	span.SetAttributes(attribute.String("url.path", tracePath(c)),
		attribute.String("client.address", c.RealIP()))
	if code := refusalCode(c, err); code != "" {
		span.SetAttributes(AttrCode.String(string(code)))
	}
}

// refusalCode is the problem code the request was answered with: the
// error's, or rate_limited for a /limits/check that answered 429 with its
// decisions; "" when it was not refused.
func refusalCode(c echo.Context, err error) problem.Code {
	if err != nil {
		return httpx.AsGuardError(err).Code
	}
	if c.Response().Status == http.StatusTooManyRequests {
		return problem.CodeRateLimited
	}
	return ""
}

// tracePath is the request's path fit for a span: on a matched route, the
// route with each parameter filled in masked (a phone number as
// guard.MaskPhone shows it, a row id of a few digits as it is, anything
// else, such as a verification id, by its name: /otp/verifications/{id});
// on no route, the path with every phone-like run masked.
func tracePath(c echo.Context) string {
	route := c.Path()
	names, values := c.ParamNames(), c.ParamValues()
	if route == "" || strings.Contains(route, "*") || len(values) < len(names) {
		return maskDigits(c.Request().URL.Path)
	}
	segs := strings.Split(route, "/")
	for i, seg := range segs {
		name, ok := strings.CutPrefix(seg, ":")
		if !ok {
			continue
		}
		segs[i] = "{" + name + "}"
		for j, n := range names {
			if n != name {
				continue
			}
			switch v := values[j]; {
			case name == "phone":
				segs[i] = maskDigits(v)
			case len(v) > 0 && len(v) < 6 && strings.Trim(v, "0123456789") == "":
				segs[i] = v
			}
		}
	}
	return strings.Join(segs, "/")
}

// phoneLike is what may be a phone number in a path: six or more digits,
// optionally after a '+', with up to two separators between digits
// ("+44-7911-12-34-55", "+44 7911 123455").
var phoneLike = regexp.MustCompile(`\+?[0-9](?:[ ().-]{0,2}[0-9]){5,}`)

// maskDigits masks every phone-like run in s as guard.MaskPhone does: a
// phone number in a path shows its country code and last two digits only,
// whatever separators it was written with.
func maskDigits(s string) string {
	return phoneLike.ReplaceAllStringFunc(s, func(m string) string {
		return guard.MaskPhone(strings.Map(func(r rune) rune {
			if r == '+' || '0' <= r && r <= '9' {
				return r
			}
			return -1
		}, m))
	})
}

// traceAttr is the request log line's trace_id: the trace ID of ctx's
// span, or nothing (an empty Attr, which slog leaves out) without one.
func traceAttr(ctx context.Context) slog.Attr {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return slog.Attr{}
	}
	return slog.String("trace_id", sc.TraceID().String())
}
