package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/httpx"
)

// The API listener's servers (OTPGUARD_HTTP_SERVER).
const (
	httpServerNet  = "net/http"
	httpServerFast = "fasthttp"
)

// apiServer is what Run needs of the API listener's server: serve, and
// stop as http.Server's Shutdown and Close do.
type apiServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// fastServer serves the handler through valyala/fasthttp and a net/http
// adaptor (serveInline; serveStreaming for a keyed send): the same
// echo handler, routes and middleware as net/http, on a leaner HTTP/1.1
// server. What it does differently from net/http, and what it keeps:
//   - Every request runs on base, not on fasthttp's RequestCtx: fasthttp
//     ends every request's context as soon as Shutdown starts, which would
//     cut the drain's requests instead of finishing them; base ends at the
//     cut, as with net/http. A caller hanging up does not end it (net/http
//     notices that only by a background read, which fasthttp never does).
//   - The timeouts are net/http's, but fasthttp has no header timeout of
//     its own: ReadTimeout (10 s) bounds the header and the body together.
//   - The header is bounded as MaxHeaderBytes is (16 KiB; 431 past it);
//     a body past the largest route's limit (ImportBodyLimit) is refused
//     with 413 before it is read; each route's own limit stays echo's
//     (413 as today).
//   - No Server field; Date as net/http writes it; Connection: close on
//     every answer once the drain has started; every body goes with its
//     Content-Length (net/http chunks one past 2 KiB), but a keyed send's
//     flushed without one, chunked.
//
// fasthttp's Shutdown cannot be called twice (the second returns at once),
// and waits only for connections, not for a keyed send storing its answer
// after the answer has left (serveStreaming): so the requests still
// running are counted here, for the drain and the cut.
type fastServer struct {
	srv      *fasthttp.Server
	inflight atomic.Int64
	drained  atomic.Bool
}

// newFastServer serves h, its requests on base; native, when not nil,
// takes the adapted handler and serves what it can itself
// (httpapi.Server.FastChecks).
func newFastServer(h http.Handler, base context.Context, log *slog.Logger,
	native func(context.Context, fasthttp.RequestHandler) fasthttp.RequestHandler) *fastServer {
	f := &fastServer{}
	streaming, inline := serveStreaming(h, base, &f.inflight), serveInline(h, base)
	// A keyed send flushes its answer to the caller before storing it
	// (httpapi's answerRecorder.send), so that the caller waits on two
	// round trips, not three: only the streaming adaptor, which runs the
	// handler on a goroutine of its own, can send an answer, its length
	// declared, before the handler returns. Every other request runs
	// inline (a key held empty is refused, before anything is flushed).
	adapted := func(ctx *fasthttp.RequestCtx) {
		if len(ctx.Request.Header.Peek(httpapi.HeaderIdempotencyKey)) > 0 {
			streaming(ctx)
			return
		}
		inline(ctx)
	}
	if native != nil {
		adapted = native(base, adapted)
	}
	f.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			f.inflight.Add(1)
			defer f.inflight.Add(-1)
			adapted(ctx)
		},
		ReadTimeout:           10 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		ReadBufferSize:        16 << 10,
		MaxRequestBodySize:    httpapi.ImportBodyLimit,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		Logger:                fastLogger{log},
		ErrorHandler:          fastError,
	}
	return f
}

func (f *fastServer) Serve(ln net.Listener) error {
	if err := f.srv.Serve(ln); err != nil {
		return err
	}
	return http.ErrServerClosed // as net/http says it after Shutdown
}

// Shutdown closes the listener and waits for the requests in flight:
// the first time through fasthttp's Shutdown, then, as after that (the
// cut), by counting them.
func (f *fastServer) Shutdown(ctx context.Context) error {
	if !f.drained.Swap(true) {
		if err := f.srv.ShutdownWithContext(ctx); err != nil {
			return err
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for f.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Close: nothing past Shutdown; the process exits after Run.
func (f *fastServer) Close() error { return nil }

// fastError answers a request fasthttp could not read, as net/http's
// server and echo would: a body past MaxRequestBodySize is 413
// body_too_large as problem details (what echo's body limit answers), a
// header past ReadBufferSize 431, a timeout 408, anything else 400; the
// connection is closed after it.
func fastError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		ctx.SetStatusCode(http.StatusRequestEntityTooLarge)
		ctx.SetContentType("application/problem+json")
		_ = httpx.WriteJSON(ctx, httpx.Problem{
			Type: "urn:otpguard:problem:" + string(guard.CodeBodyTooLarge), Title: http.StatusText(http.StatusRequestEntityTooLarge),
			Status: http.StatusRequestEntityTooLarge, Detail: "request body is too large", Code: string(guard.CodeBodyTooLarge),
		})
	case errors.As(err, &small):
		ctx.Error("Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &netErr) && netErr.Timeout():
		ctx.Error("Request Timeout", http.StatusRequestTimeout)
	default:
		ctx.Error("Bad Request", http.StatusBadRequest)
	}
}

// fastLogger is fasthttp's error log (a connection it could not serve) as
// a debug line: what a client sends wrong is not the operator's problem.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	l.log.Debug("http server", "err", fmt.Sprintf(format, args...))
}
