package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// serveInline runs h, its requests on base, on fasthttp's worker
// goroutine, its answer written straight into ctx.Response.
// fasthttpadaptor.NewFastHTTPHandler runs every request on a goroutine of
// its own, so that a handler may Flush or Hijack, and pipes the answer
// back: the new goroutine's stack grows again through the whole echo
// chain (runtime.newstack and copystack were 4.7 % of a send's CPU under
// wrk -c16, issue 26), and the hand-offs cost scheduling and channel
// operations. The worker's stack has grown already, and no route here
// hijacks; the one that flushes goes through the streaming adaptor
// (newFastServer).
//
// The answer is net/http's as a client sees it, except for its framing:
// fasthttp sends every body with its Content-Length, where net/http chunks
// one past 2 KiB (as fasthttpadaptor does); a Date or Transfer-Encoding
// the handler sets is fasthttp's to write; a body that is not the
// Content-Length the handler declared gets no answer at all, where
// net/http sends the header before it cuts the connection.
func serveInline(h http.Handler, base context.Context) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		var r http.Request
		if !convert(ctx, ctx, &r) {
			return
		}
		w := inlineWriter{ctx: ctx, header: make(http.Header), declared: -1}
		defer abortOnPanic(ctx)
		h.ServeHTTP(&w, r.WithContext(base))
		w.finish()
	}
}

// convert makes r of from's request, or answers ctx 500 as
// fasthttpadaptor answers a target net/url cannot parse. r's strings and
// body are from's memory.
func convert(ctx, from *fasthttp.RequestCtx, r *http.Request) bool {
	if err := fasthttpadaptor.ConvertRequest(from, r, true); err != nil {
		ctx.Logger().Printf("cannot parse requestURI %q: %v", r.RequestURI, err)
		ctx.Error("Internal Server Error", fasthttp.StatusInternalServerError)
		return false
	}
	return true
}

// abortOnPanic ends the connection without an answer when the handler
// panicked with http.ErrAbortHandler or an invalid status, as net/http and
// fasthttpadaptor do; any other panic goes on (fasthttpadaptor panics the
// worker too: the process has no recover of its own).
func abortOnPanic(ctx *fasthttp.RequestCtx) {
	rec := recover()
	if rec == nil {
		return
	}
	if _, invalid := rec.(invalidStatus); !invalid && rec != http.ErrAbortHandler {
		panic(rec)
	}
	abort(ctx)
}

// abort closes ctx's connection without an answer.
func abort(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { _ = c.Close() })
}

// invalidStatus is WriteHeader's panic for a code net/http refuses.
type invalidStatus int

func (code invalidStatus) Error() string {
	return fmt.Sprintf("invalid WriteHeader code %d", int(code))
}

// inlineWriter is an http.ResponseWriter writing into a fasthttp
// response. As net/http's, it takes the header when the status is
// written (WriteHeader or the first Write): what is set after is not sent.
type inlineWriter struct {
	ctx    *fasthttp.RequestCtx
	header http.Header
	status int // 0 until written
	// sniff: the body names its Content-Type, as net/http finds it, for
	// want of one (and of a Content-Encoding) in the header.
	sniff bool
	// declared is the Content-Length the header set, -1 for none;
	// written counts what the handler wrote, as net/http does.
	declared, written int64
	// live is the streaming mode's hand-off (serveStreaming), nil inline.
	live *handOff
}

func (w *inlineWriter) Header() http.Header { return w.header }

// WriteHeader writes the status and the header: the first final status
// only; a 1xx but 101 is interim and not sent (RFC 9110 allows a server
// not to), as with fasthttpadaptor.
func (w *inlineWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(invalidStatus(code)) // net/http's range
	}
	if w.status != 0 || code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	w.status = code
	w.ctx.SetStatusCode(code)
	_, typed := w.header["Content-Type"]
	w.sniff = bodyAllowed(code) && !typed && w.header.Get("Content-Encoding") == ""
	if cl := w.header.Get("Content-Length"); cl != "" {
		// An invalid one is fasthttp's to drop, as net/http drops it.
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.declared = n
		}
	}
	resp := &w.ctx.Response.Header
	for k, vv := range w.header {
		if !sent(k, code) {
			continue
		}
		for _, v := range vv {
			resp.Add(k, v)
		}
	}
}

// sent: the header field k goes out with status code. Not a trailer (no
// route sends one; fasthttp would need a stream for it), nor what
// net/http suppresses for a status without a body.
func sent(k string, code int) bool {
	switch {
	case k == "Trailer" || strings.HasPrefix(k, http.TrailerPrefix):
		return false
	case bodyAllowed(code):
		return true
	case k == "Content-Length":
		return false
	}
	return k != "Content-Type" || code != http.StatusNotModified
}

// Write appends p to the body; as net/http, it refuses a body the status
// does not allow and one past the declared Content-Length. A HEAD's body
// is kept for its length and not sent (fasthttp's SkipBody).
func (w *inlineWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	// Counted even when refused, as net/http does: a body past the
	// declared length fails the answer (finish).
	w.written += int64(len(p))
	if w.declared >= 0 && w.written > w.declared {
		return 0, http.ErrContentLength
	}
	if w.live != nil && w.live.done {
		return w.live.write(p)
	}
	w.ctx.Response.AppendBody(p)
	return len(p), nil
}

// Flush holds on inline: the answer leaves whole once the handler
// returns. Streaming, the first Flush hands the answer to fasthttp
// (handOff); the body written after goes straight to it.
func (w *inlineWriter) Flush() {
	if w.live == nil || w.live.done {
		return
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.live.events <- true
	<-w.live.ready
}

// finish writes what the handler left unwritten: the status (200) and the
// header as they are now, and the Content-Type sniffed from the body. A
// body that is not the Content-Length declared ends the connection
// instead: net/http sends the header and closes it, so that the caller
// cannot take a short answer for a whole one.
func (w *inlineWriter) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.declared >= 0 && w.written != w.declared && bodyAllowed(w.status) && !w.ctx.IsHead() {
		abort(w.ctx)
		return
	}
	if body := w.ctx.Response.Body(); w.sniff && len(body) > 0 {
		w.ctx.Response.Header.SetContentType(http.DetectContentType(body[:min(len(body), 512)]))
	}
}

// bodyAllowed is net/http's bodyAllowedForStatus.
func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}
