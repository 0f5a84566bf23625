package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// serveStreaming runs h, its requests on base, on a goroutine of its own,
// so that its answer can leave before it returns: a keyed send flushes
// its answer to the caller and only then stores it (httpapi's
// answerRecorder.send). At the first Flush fasthttp takes the status and
// the header (the inline writer's rules) and streams the body, with the
// Content-Length the handler declared: the caller has the whole answer
// once that much is written, while the handler goes on. Without one the
// body is chunked and ends when the handler returns.
//
// fasthttpadaptor runs the handler so too, but drops the Content-Length
// of a flushed answer: the chunked body's end reached the caller only
// once the handler had returned, after the answer's store.
//
// The handler may outlive fasthttp's request, which is reused once the
// answer is out: so it gets a copy of the request, and its goroutine
// counts in inflight until it returns, for the drain to wait on it.
func serveStreaming(h http.Handler, base context.Context, inflight *atomic.Int64) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		// ctx's logger is bound to ctx, which is reused: own logs, if ever,
		// through fasthttp's default.
		var own fasthttp.RequestCtx
		own.Init(&ctx.Request, ctx.RemoteAddr(), nil)
		var r http.Request
		if !convert(ctx, &own, &r) {
			return
		}
		r.TLS = ctx.TLSConnectionState()
		live := &handOff{events: make(chan bool, 1), ready: make(chan struct{})}
		w := &inlineWriter{ctx: ctx, header: make(http.Header), declared: -1, live: live}
		inflight.Add(1)
		go func() {
			defer inflight.Add(-1)
			defer w.returned()
			h.ServeHTTP(w, r.WithContext(base))
		}()
		switch flushed, ok := <-live.events; {
		case flushed:
			w.handOff()
			close(live.ready)
		case ok:
			w.finish()
		default:
			abort(ctx)
		}
	}
}

// handOff is a streaming writer's state: the handler's goroutine tells
// fasthttp's (events) that it flushed (true) or returned (false; the
// channel closed for a panic that aborts), and waits on ready for the
// hand-off. Past it (done) ctx is fasthttp's alone: the body goes to
// pipe, nil when there is no more of it to send.
type handOff struct {
	events chan bool
	ready  chan struct{}
	done   bool
	pipe   *io.PipeWriter
}

// handOff, on fasthttp's goroutine, hands the answer flushed to fasthttp:
// whole when its body is (or has none), else the body so far and a pipe
// for the rest. A body past the declared length ends the connection, as
// finish would.
func (w *inlineWriter) handOff() {
	ctx, body := w.ctx, w.ctx.Response.Body()
	w.live.done, w.ctx = true, nil // ctx is not the handler's any more
	if w.sniff && len(body) > 0 {
		ctx.Response.Header.SetContentType(http.DetectContentType(body[:min(len(body), 512)]))
	}
	switch {
	case w.declared >= 0 && w.written > w.declared:
		abort(ctx)
		return
	case !bodyAllowed(w.status) || ctx.IsHead() || w.declared >= 0 && w.written == w.declared:
		return // the answer is whole: fasthttp sends it as it is
	}
	pr, pw := io.Pipe()
	w.live.pipe = pw
	s := &answerStream{pre: bytes.Clone(body), pipe: pr, left: w.declared}
	ctx.Response.SetBodyStream(s, int(w.declared))
	// Chunked, the body's first bytes carry the header out; with nothing
	// written yet, the header goes alone.
	ctx.Response.ImmediateHeaderFlush = w.declared < 0 && len(s.pre) == 0
}

// write sends p, past the hand-off, to fasthttp's stream; nothing is left
// to send of a whole answer (Write refuses what the status or the length
// does not allow).
func (l *handOff) write(p []byte) (int, error) {
	if l.pipe == nil || len(p) == 0 {
		return len(p), nil
	}
	return l.pipe.Write(p)
}

// returned, on the handler's goroutine, ends its answer: before the
// hand-off it is fasthttp's goroutine that finishes it (or aborts it
// after a handler's abort); past it, the stream ends, cut short when the
// body is not the length declared, or the handler aborted, so that the
// caller cannot take a short answer for a whole one.
func (w *inlineWriter) returned() {
	rec := recover()
	if _, invalid := rec.(invalidStatus); rec != nil && !invalid && rec != http.ErrAbortHandler {
		panic(rec) // as serveInline: the process has no recover of its own
	}
	l := w.live
	switch {
	case !l.done && rec != nil:
		close(l.events)
	case !l.done:
		l.events <- false
	case l.pipe == nil:
	case rec != nil || w.declared >= 0 && w.written != w.declared:
		_ = l.pipe.CloseWithError(io.ErrUnexpectedEOF)
	default:
		_ = l.pipe.Close()
	}
}

// answerStream is a streamed answer's body for fasthttp: what was written
// before the hand-off, then the pipe; with a declared length it ends once
// that much is read (left, -1 without), not when the handler returns.
type answerStream struct {
	pre  []byte
	pipe *io.PipeReader
	left int64
}

func (s *answerStream) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if s.left > 0 && int64(len(p)) > s.left {
		p = p[:s.left]
	}
	var n int
	var err error
	if len(s.pre) > 0 {
		n = copy(p, s.pre)
		s.pre = s.pre[n:]
	} else {
		n, err = s.pipe.Read(p)
	}
	if s.left > 0 {
		s.left -= int64(n)
	}
	return n, err
}

// Close, by fasthttp once the answer is written or has failed: a handler
// still writing gets io.ErrClosedPipe rather than waiting for a reader.
func (s *answerStream) Close() error { return s.pipe.Close() }
