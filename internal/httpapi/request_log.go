package httpapi

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// quietRoutes are scraped and probed every few seconds: their lines are
// debug, not info, so that they do not drown the requests that matter.
var quietRoutes = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// zeroStatuses are the HTTP series created at zero, per "METHOD route",
// for alert rules on the decision routes.
var zeroStatuses = map[string][]int{
	"POST /otp/send":     {200, 429, 503},
	"POST /otp/verify":   {200, 400, 429, 503},
	"POST /limits/check": {200, 429, 503},
}

// checkRoute is the route whose allowed answers are sampled in the log.
const checkRoute = "/limits/check"

// checkSample picks the allowed checks whose request line is written at
// info: the first and then one in every. A line per decision is a large
// share of a check's CPU and says nothing the metrics do not; refusals
// and errors, which an operator
// looks for by request ID, are never sampled. The others go to debug, so
// OTPGUARD_LOG_LEVEL=debug still has a line per request.
type checkSample struct {
	every uint64
	seen  *atomic.Uint64
}

func newCheckSample(every int) checkSample {
	return checkSample{every: uint64(max(1, every)), seen: new(atomic.Uint64)}
}

// logged counts one allowed check and says whether its line is at info.
func (c checkSample) logged() bool {
	return c.every == 1 || c.seen.Add(1)%c.every == 1
}

// logPhone notes the number a request concerned, for its log line
// (httpx.LogPhone: the Verify routes note theirs the same way).
func logPhone(c echo.Context, e164 string) { httpx.LogPhone(c, e164) }

// logRequest records one answered request: the HTTP metrics, then one log
// line (at debug for the allowed checks checkSample leaves out) with method, route, status, latency_ms (a float), request_id, and
// for a refusal its code and the masked number when there is one, and the
// trace ID when the request is traced.
func (s *Server) logRequest(c echo.Context, v middleware.RequestLoggerValues) {
	phone := httpx.LoggedPhone(c)
	s.logLine(c.Request().Context(), v, phone)
}

// logLine is logRequest's work, whatever the transport: phone is the
// number the request concerned, "" for none.
func (s *Server) logLine(ctx context.Context, v middleware.RequestLoggerValues, phone string) {
	s.metrics.ObserveHTTP(v.Method, v.RoutePath, v.Status, v.Latency)
	var code problem.Code
	switch {
	case v.Error != nil:
		code = httpx.AsGuardError(v.Error).Code
	case v.Status == 429: // a denied /limits/check answers with its decisions, not an error
		code = problem.CodeRateLimited
	}
	level := slog.LevelInfo
	switch {
	case quietRoutes[v.RoutePath]:
		level = slog.LevelDebug
	case v.Status >= 500 && code == problem.CodeStoreUnavailable:
		// An outage refuses every request: the breaker tells it once
		// (docs/outage.md), at WARN; a refused check is a debug line, for
		// there may be thousands a second. Every other refusal (a send, a
		// verify: an SMS's worth each) keeps its info line, so that the
		// request ID a caller was answered finds it.
		level = limit.StoreFailureLevel(v.Error)
		if level < slog.LevelInfo && v.RoutePath != checkRoute {
			level = slog.LevelInfo
		}
	case v.Status >= 500:
		level = slog.LevelError
	case v.RoutePath == checkRoute && v.Status < 400 && !s.checks.logged():
		level = slog.LevelDebug
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("method", v.Method), slog.String("route", v.RoutePath),
		slog.Int("status", v.Status), slog.Float64("latency_ms", float64(v.Latency)/float64(time.Millisecond)),
		slog.String("request_id", v.RequestID))
	if code != "" {
		attrs = append(attrs, slog.String("code", string(code)))
	}
	if phone != "" {
		attrs = append(attrs, slog.String("phone", guard.MaskPhone(phone)))
	}
	if t := traceAttr(ctx); t.Key != "" {
		attrs = append(attrs, t)
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
}
