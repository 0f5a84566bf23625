package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/httpapi"
)

// serveFast serves h through fastServer on a free port, its requests on
// base; it returns the server and its URL.
func serveFast(t *testing.T, h http.Handler, base context.Context) (*fastServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := newFastServer(h, base, slog.New(slog.DiscardHandler), nil)
	errc := make(chan error, 1)
	go func() { errc <- f.Serve(ln) }()
	t.Cleanup(func() {
		_ = f.Shutdown(context.Background())
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return f, "http://" + ln.Addr().String()
}

// TestFastServerDrainThenCut: Shutdown's drain lets a request in flight
// finish on a context that is still live (fasthttp's own request context
// ends as the drain starts); the cut ends that context, the request
// answers, and the second Shutdown sees it gone; a request that ignores
// the cut makes the second Shutdown fail.
func TestFastServerDrainThenCut(t *testing.T) {
	base, cut := context.WithCancel(context.Background())
	defer cut()
	started := make(chan struct{}, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-time.After(300 * time.Millisecond):
			w.WriteHeader(http.StatusOK)
		}
	})
	f, url := serveFast(t, h, base)
	got := make(chan int, 1)
	go func() {
		res, err := http.Get(url + "/slow")
		if err != nil {
			got <- 0
			return
		}
		res.Body.Close()
		got <- res.StatusCode
	}()
	<-started
	if err := f.Shutdown(context.Background()); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if s := <-got; s != http.StatusOK {
		t.Fatalf("the request in flight during the drain answered %d, want 200 (its context must outlive the drain's start)", s)
	}
}

func TestFastServerCut(t *testing.T) {
	base, cut := context.WithCancel(context.Background())
	defer cut()
	started, release := make(chan struct{}, 2), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		if r.URL.Path == "/stubborn" {
			<-release
			return
		}
		<-r.Context().Done() // until the cut
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	f, url := serveFast(t, h, base)
	got := make(chan int, 2)
	get := func(path string) {
		res, err := http.Get(url + path)
		if err != nil {
			got <- 0
			return
		}
		res.Body.Close()
		got <- res.StatusCode
	}
	go get("/hung")
	<-started
	dctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := f.Shutdown(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain with a hung request: %v, want context.DeadlineExceeded", err)
	}
	cut()
	if s := <-got; s != http.StatusServiceUnavailable {
		t.Errorf("the cut request answered %d, want 503 (its handler's answer)", s)
	}
	gctx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := f.Shutdown(gctx); err != nil {
		t.Errorf("after the cut: %v, want nil (no request left)", err)
	}

	// One that ignores the cut: the second Shutdown reports it.
	f.inflight.Add(1) // as a stubborn handler would hold it
	gctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if err := f.Shutdown(gctx3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with a request still running after the cut: %v, want context.DeadlineExceeded", err)
	}
	f.inflight.Add(-1)
	close(release)
}

// TestFastServerLimits: what net/http's server bounds, fastServer bounds
// the same way: a header past 16 KiB is 431, a body past the largest
// route's limit 413; the handler sees the peer's address (for
// OTPGUARD_TRUSTED_PROXIES) and writes no Server field.
func TestFastServerLimits(t *testing.T) {
	var peer string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer = r.RemoteAddr
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})
	_, url := serveFast(t, h, context.Background())

	res, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Server") != "" || res.Header.Get("Date") == "" {
		t.Errorf("plain GET: %d, Server %q, Date %q; want 200, no Server, a Date", res.StatusCode, res.Header.Get("Server"), res.Header.Get("Date"))
	}
	if host, _, _ := net.SplitHostPort(peer); host != "127.0.0.1" {
		t.Errorf("the handler saw RemoteAddr %q, want 127.0.0.1:port", peer)
	}

	req, _ := http.NewRequest("GET", url+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 17<<10))
	if res, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else if res.Body.Close(); res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 17 KiB header: %d, want 431", res.StatusCode)
	}

	// A body past ImportBodyLimit is refused from its Content-Length, before
	// it is read: so the test sends none (a client still writing 512 KiB
	// when the server answers and closes may be reset before it reads the
	// answer, which failed this test on a busy machine).
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: otpguard\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", httpapi.ImportBodyLimit+1)
	res, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"code":"body_too_large"`) {
		t.Errorf("a body past ImportBodyLimit: %d %s, want 413 body_too_large", res.StatusCode, b)
	}
}
