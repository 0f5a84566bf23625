package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/valyala/fasthttp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
)

// FastChecks serves POST /limits/check on fasthttp itself and hands every
// other request to next (the echo handler through fasthttp's net/http
// adaptor). Through the adaptor a check costs what it costs on net/http:
// building an http.Request, its header map and a ResponseWriter for echo
// eats what fasthttp saves (docs/benchmarks.md, "fasthttp in front of the
// check"). Requests run on base.
//
// It answers as checkLimits behind its middleware does, from the same
// core (decideChecks, rateLimitFields, newRequestID, logLine, admission,
// httpx.ProblemOf): the request ID, the body limit (413), the API-key
// limiter of the caller's address, the admission slot, the decisions'
// metrics, the RateLimit fields, Retry-After, the answer, the problem
// details of an error, the request log line and the HTTP metrics. It does
// not trace: the app uses it only with tracing off. What it leaves to
// echo, before anything is counted or spent: any bearer but a valid API
// key (a wrong key is counted and audited there), a query string (?pretty),
// echo's debug mode, any other method or path.
func (s *Server) FastChecks(base context.Context, next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !s.servesFast(ctx) {
			next(ctx)
			return
		}
		start := time.Now()
		id := newRequestID(string(ctx.Request.Header.Peek(echo.HeaderXRequestID)))
		ctx.Response.Header.Set(echo.HeaderXRequestID, id)
		err := s.fastCheck(base, ctx)
		if err != nil {
			s.fastProblem(base, ctx, id, err)
		}
		s.logLine(base, middleware.RequestLoggerValues{StartTime: start, Latency: time.Since(start),
			Method: http.MethodPost, RoutePath: checkRoute, RequestID: id, Status: ctx.Response.StatusCode(), Error: err}, "")
	}
}

// servesFast: the request is a check FastChecks answers itself.
func (s *Server) servesFast(ctx *fasthttp.RequestCtx) bool {
	if !ctx.IsPost() || string(ctx.Path()) != checkRoute || len(ctx.URI().QueryString()) > 0 || s.echo.Debug {
		return false
	}
	token, ok := httpx.BearerOf(string(ctx.Request.Header.Peek(echo.HeaderAuthorization)))
	return ok && s.apiKeys.Holds(token)
}

// fastCheck decides the check and writes its answer, or returns the error
// to answer; the order is echo's: body limit, API-key limiter, admission.
func (s *Server) fastCheck(base context.Context, ctx *fasthttp.RequestCtx) (err error) {
	body := ctx.PostBody()
	if len(body) > BodyLimit {
		return echo.ErrStatusRequestEntityTooLarge
	}
	if _, err := s.apiKeyLimit.Admit(base, s.fastIP(ctx), true); err != nil {
		return err
	}
	if !s.admission.enter(checkRoute) {
		return guard.Overloaded(guard.ErrOverloaded)
	}
	defer func() { s.admission.leave(err, checkRoute) }()
	var req checkRequest
	if err := httpx.DecodeBytes(body, &req); err != nil {
		return err
	}
	lim, batch, err := s.decideChecks(base, &req)
	if err != nil {
		return err
	}
	h := &ctx.Response.Header
	if pol, fields, ok := rateLimitFields(lim, batch.Denying()); ok {
		h.Set("Ratelimit-Policy", pol)
		h.Set("Ratelimit", fields)
	}
	ctx.SetStatusCode(http.StatusOK)
	if !batch.Allowed {
		ctx.SetStatusCode(http.StatusTooManyRequests)
		h.Set("Retry-After", strconv.Itoa(httpx.RetrySeconds(batch.Denying().RetryAfter)))
	}
	h.SetContentType(echo.MIMEApplicationJSON)
	buf := s.bufs.get()
	*buf = appendCheckResponse(*buf, batch)
	ctx.SetBody(*buf) // copied
	s.bufs.put(buf)
	return nil
}

// fastProblem answers err as httpx.ErrorHandler does.
func (s *Server) fastProblem(base context.Context, ctx *fasthttp.RequestCtx, id string, err error) {
	if errors.Is(base.Err(), context.Canceled) { // cut at shutdown
		s.log.DebugContext(base, "caller went away", "path", checkRoute, "request_id", id, "err", err)
		ctx.SetStatusCode(httpx.StatusClientClosed)
		return
	}
	p := httpx.ProblemOf(err, id)
	if p.Status >= 500 {
		httpx.LogFailure(base, s.log, checkRoute, p, err)
	}
	if p.RetryAfter != nil {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(*p.RetryAfter))
	}
	ctx.Response.Header.SetContentType("application/problem+json")
	ctx.SetStatusCode(p.Status)
	_ = httpx.WriteJSON(ctx, p)
}

// fastIP is the caller's address as echo's IPExtractor (clientIP) reads
// it: the peer, or with trusted proxies what a trusted one forwards.
func (s *Server) fastIP(ctx *fasthttp.RequestCtx) string {
	if !s.trustsProxies {
		return ctx.RemoteIP().String()
	}
	r := &http.Request{RemoteAddr: ctx.RemoteAddr().String(), Header: http.Header{}}
	for _, k := range []string{echo.HeaderXForwardedFor, echo.HeaderXRealIP} {
		for _, v := range ctx.Request.Header.PeekAll(k) {
			r.Header.Add(k, string(v))
		}
	}
	return s.echo.IPExtractor(r)
}
