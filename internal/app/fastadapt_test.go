package app

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writerCase is a handler served by net/http and by fastServer; note
// records what the handler saw (Write's errors), compared too.
type writerCase struct {
	name   string
	method string
	serve  func(w http.ResponseWriter, note func(error))
	// chunked: net/http chunks this body; fasthttp sends its length.
	chunked bool
}

func writerCases() []writerCase {
	write := func(w http.ResponseWriter, note func(error), s string) {
		_, err := io.WriteString(w, s)
		note(err)
	}
	big := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB, past every buffer
	return []writerCase{
		{name: "nothing written is 200", serve: func(http.ResponseWriter, func(error)) {}},
		{name: "a body names its type", serve: func(w http.ResponseWriter, n func(error)) { write(w, n, "<html>hi</html>") }},
		{name: "WriteHeader twice", serve: func(w http.ResponseWriter, n func(error)) {
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusInternalServerError)
			write(w, n, "made")
		}},
		{name: "a header after WriteHeader is not sent", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("X-Early", "1")
			w.WriteHeader(http.StatusAccepted)
			w.Header().Set("X-Late", "1")
			w.Header().Set("Content-Type", "application/json")
			write(w, n, "plain text, sniffed")
		}},
		{name: "a header after the first Write is not sent", serve: func(w http.ResponseWriter, n func(error)) {
			write(w, n, "a")
			w.Header().Set("X-Late", "1")
			write(w, n, "b")
		}},
		{name: "multi-valued fields and cookies", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			http.SetCookie(w, &http.Cookie{Name: "s", Value: "1", HttpOnly: true})
			http.SetCookie(w, &http.Cookie{Name: "t", Value: "2", Path: "/x"})
			w.Header().Set("Cache-Control", "no-store")
			write(w, n, `{"ok":true}`)
		}},
		{name: "an empty body with its type", serve: func(w http.ResponseWriter, _ func(error)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
		}},
		{name: "a type held empty is not sniffed", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header()["Content-Type"] = nil
			write(w, n, "<html>hi</html>")
		}},
		{name: "an encoded body is not sniffed", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Encoding", "identity")
			write(w, n, "<html>hi</html>")
		}},
		{name: "HEAD with a body", method: http.MethodHead, serve: func(w http.ResponseWriter, n func(error)) { write(w, n, "<html>hi</html>") }},
		{name: "HEAD without one", method: http.MethodHead, serve: func(http.ResponseWriter, func(error)) {}},
		{name: "204 takes no body", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "4")
			w.WriteHeader(http.StatusNoContent)
			write(w, n, "body")
		}},
		{name: "304 takes no body nor type", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "4")
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
			write(w, n, "body")
		}},
		{name: "an interim 1xx is not the status", serve: func(w http.ResponseWriter, n func(error)) {
			w.WriteHeader(http.StatusEarlyHints)
			write(w, n, "final")
		}},
		{name: "the declared Content-Length", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Length", "3")
			write(w, n, "abc")
		}},
		{name: "a body past the declared Content-Length", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Length", "3")
			write(w, n, "abcdef") // refused whole, and counted
			write(w, n, "abc")
		}},
		{name: "a body short of the declared Content-Length", serve: func(w http.ResponseWriter, n func(error)) {
			w.Header().Set("Content-Length", "3")
			write(w, n, "ab")
		}},
		{name: "HEAD with a declared Content-Length", method: http.MethodHead, serve: func(w http.ResponseWriter, _ func(error)) {
			w.Header().Set("Content-Length", "3")
		}},
		{name: "a large body", chunked: true, serve: func(w http.ResponseWriter, n func(error)) { write(w, n, big) }},
	}
}

// seen is what a client got, and what the handler saw, from one server.
type seen struct {
	Status int
	Header http.Header
	Length int64
	Body   string
	Notes  []string
	Err    bool
}

// TestInlineWriterAsNetHTTP: the inline writer answers as net/http does,
// a real net/http server the oracle, but for the framing of a body past
// net/http's buffer (fasthttp sends its length) and the Date.
func TestInlineWriterAsNetHTTP(t *testing.T) {
	for _, c := range writerCases() {
		t.Run(c.name, func(t *testing.T) {
			h, notes := noting(c.serve)
			oracle := httptest.NewUnstartedServer(h)
			oracle.Config.ErrorLog = log.New(io.Discard, "", 0)
			oracle.Start()
			defer oracle.Close()
			_, fast := serveFast(t, h, context.Background())

			want := fetch(t, oracle.URL, c.method, notes)
			got := fetch(t, fast, c.method, notes)
			if c.chunked {
				if want.Length != -1 || got.Length != int64(len(got.Body)) {
					t.Errorf("Content-Length: net/http %d, fasthttp %d; want -1 (chunked) and %d", want.Length, got.Length, len(got.Body))
				}
				want.Length = got.Length
				got.Header.Del("Content-Length")
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("fasthttp answered otherwise than net/http (-net/http +fasthttp):\n%s", d)
			}
		})
	}
}

// TestInlineWriterAborts: a handler's http.ErrAbortHandler or invalid
// status ends the connection without an answer, as on net/http.
func TestInlineWriterAborts(t *testing.T) {
	for name, serve := range map[string]func(http.ResponseWriter){
		"ErrAbortHandler": func(http.ResponseWriter) { panic(http.ErrAbortHandler) },
		"invalid status":  func(w http.ResponseWriter) { w.WriteHeader(1000) },
	} {
		t.Run(name, func(t *testing.T) {
			h, notes := noting(func(w http.ResponseWriter, _ func(error)) { serve(w) })
			oracle := httptest.NewUnstartedServer(h)
			oracle.Config.ErrorLog = log.New(io.Discard, "", 0)
			oracle.Start()
			defer oracle.Close()
			_, fast := serveFast(t, h, context.Background())
			want, got := fetch(t, oracle.URL, "", notes), fetch(t, fast, "", notes)
			if !want.Err || !got.Err {
				t.Errorf("client failed: net/http %v, fasthttp %v; want both (no answer)", want.Err, got.Err)
			}
		})
	}
}

// notes collects what a handler saw, for fetch.
type notes struct {
	mu   sync.Mutex
	seen []string
}

func (n *notes) add(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		n.seen = append(n.seen, "ok")
		return
	}
	n.seen = append(n.seen, err.Error())
}

// take returns the notes so far and forgets them.
func (n *notes) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	seen := n.seen
	n.seen = nil
	return seen
}

// noting serves serve, its notes collected.
func noting(serve func(http.ResponseWriter, func(error))) (http.Handler, *notes) {
	n := &notes{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, n.add) }), n
}

// fetch sends one request on a connection of its own and returns what
// came back and the handler's notes: the answer has come whole only once
// the handler has returned, on either server.
func fetch(t *testing.T, url, method string, n *notes) seen {
	t.Helper()
	req, err := http.NewRequest(method, url+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		return seen{Err: true, Notes: n.take()}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return seen{Err: true, Notes: n.take()}
	}
	res.Header.Del("Date")
	return seen{Status: res.StatusCode, Header: res.Header, Length: res.ContentLength, Body: string(body), Notes: n.take()}
}

// TestKeyedSendStreams: a request with an Idempotency-Key reaches a
// handler that can flush its answer out before it returns (the keyed
// send stores its answer after): with the Content-Length it declared, the
// caller reads the whole answer, to its end, while the handler is held
// (fasthttpadaptor sent it chunked, its end after the handler's return);
// whether the body is whole at the flush or not. One without the key runs
// inline, where Flush holds the answer until the handler returns.
func TestKeyedSendStreams(t *testing.T) {
	for _, c := range []struct {
		name, key   string
		early, late string // written before the flush and after it
		held        bool   // the caller has the answer while the handler is held
	}{
		{name: "keyed, whole at the flush", key: "k-1", early: "sent", held: true},
		{name: "keyed, its end after the flush", key: "k-2", early: "se", late: "nt", held: true},
		{name: "not keyed", early: "sent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			release, held := make(chan struct{}), make(chan bool, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "4")
				_, _ = io.WriteString(w, c.early)
				_ = http.NewResponseController(w).Flush()
				_, _ = io.WriteString(w, c.late)
				if c.held {
					held <- hold(release)
				}
			})
			_, url := serveFast(t, h, context.Background())
			res, body, err := post(url, c.key)
			close(release)
			if err != nil || string(body) != "sent" || res.ContentLength != 4 {
				t.Fatalf("answer %q (Content-Length %d), err %v; want \"sent\", 4, no error", body, res.ContentLength, err)
			}
			if c.held && !<-held {
				t.Error("the caller had the whole answer only once the handler returned")
			}
		})
	}
}

// hold waits for release: true when it came, false when it did not come
// in 10 s, so that a caller waiting for the handler's return fails the
// test instead of hanging it.
func hold(release chan struct{}) bool {
	select {
	case <-release:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// post sends an empty POST /otp/send, with the Idempotency-Key key when
// not empty, and reads the whole answer.
func post(url, key string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/otp/send", nil)
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res, body, err
}

// TestKeyedSendChunked: a keyed answer without a Content-Length is
// streamed chunked: the caller reads what was flushed while the handler
// is held, and the rest, to its end, once it returns.
func TestKeyedSendChunked(t *testing.T) {
	release, held := make(chan struct{}), make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part one;")
		_ = http.NewResponseController(w).Flush()
		held <- hold(release)
		_, _ = io.WriteString(w, "part two")
	})
	_, url := serveFast(t, h, context.Background())
	req, _ := http.NewRequest(http.MethodPost, url+"/otp/send", nil)
	req.Header.Set("Idempotency-Key", "k-1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, len("part one;"))
	_, err = io.ReadFull(res.Body, first)
	close(release)
	rest, rerr := io.ReadAll(res.Body)
	if err != nil || rerr != nil || string(first)+string(rest) != "part one;part two" || res.ContentLength != -1 {
		t.Errorf("answer %q then %q (Content-Length %d), errors %v, %v; want the two parts, chunked (-1)", first, rest, res.ContentLength, err, rerr)
	}
	if !<-held {
		t.Error("the caller had the flushed part only once the handler returned")
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q, want the one sniffed from the part flushed", ct)
	}
}

// TestKeyedSendCut: a streamed answer short of the length it declared,
// or whose handler aborts after the flush, ends the connection: the
// caller cannot take it for a whole one.
func TestKeyedSendCut(t *testing.T) {
	for name, end := range map[string]func(http.ResponseWriter){
		"short": func(w http.ResponseWriter) { _, _ = io.WriteString(w, "n") },
		"abort": func(http.ResponseWriter) { panic(http.ErrAbortHandler) },
	} {
		t.Run(name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "4")
				_, _ = io.WriteString(w, "se")
				_ = http.NewResponseController(w).Flush()
				end(w)
			})
			_, url := serveFast(t, h, context.Background())
			if _, body, err := post(url, "k-1"); err == nil {
				t.Errorf("the caller read %q and no error, want an error (the connection cut)", body)
			}
		})
	}
}

// TestKeyedSendDrain: a keyed send still storing its answer after the
// caller has it counts as in flight: the drain waits for it.
func TestKeyedSendDrain(t *testing.T) {
	release, done := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		_, _ = io.WriteString(w, "sent")
		_ = http.NewResponseController(w).Flush()
		if hold(release) { // the store
			close(done)
		}
	})
	f, url := serveFast(t, h, context.Background())
	if _, body, err := post(url, "k-1"); err != nil || string(body) != "sent" {
		t.Fatalf("answer %q, err %v", body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("drain with a send storing its answer: %v, want context.DeadlineExceeded", err)
	}
	close(release)
	if err := f.Shutdown(context.Background()); err != nil {
		t.Errorf("drain once it stored: %v, want nil", err)
	}
	select {
	case <-done:
	default:
		t.Error("the drain ended before the handler returned")
	}
}
