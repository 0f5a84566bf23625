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
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/store/redistest"
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

// TestKeyedSendAnswersBeforeItsStore: the real keyed send, as New builds
// it, through fastServer: the caller reads its whole answer while the
// answer's store (the idempotency finish script) is held, and the drain
// waits for the store.
func TestKeyedSendAnswersBeforeItsStore(t *testing.T) {
	tg := redistest.New(t)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": "test-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_LOG_LEVEL": "warn",
		"OTPGUARD_REDIS_TIMEOUT": "10s",
	}
	cfg, err := LoadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(context.Background(), cfg, WithOutput(io.Discard), WithSender(dropSender{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	gate := &storeGate{release: make(chan struct{}), held: make(chan bool, 1)}
	a.Redis().AddHook(gate)
	f, url := serveFast(t, a.Handler(), context.Background())

	req, _ := http.NewRequest(http.MethodPost, url+"/otp/send", strings.NewReader(`{"phone":"+919800000000","client_ip":"203.0.113.7"}`))
	req.Header.Set("Authorization", "Bearer test-key-0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "6f1c7a52-3d1e-4b8e-9a57-0f3c2e4d5b61")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	// The store is held until the test releases it below (10 s at most):
	// a caller whose answer waited for it reads only after the hold ended.
	// On a busy machine the handler may not have reached the store yet,
	// which is as good: the answer left before it.
	stored := len(gate.held) > 0
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"verification_id"`) {
		t.Errorf("answer %d %s, err %v; want 200 with a verification_id", res.StatusCode, body, err)
	}
	if stored {
		t.Error("the caller had the whole answer only once its store had run")
	}
	dctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := f.Shutdown(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("drain with the store held: %v, want context.DeadlineExceeded", err)
	}
	close(gate.release)
	if err := f.Shutdown(context.Background()); err != nil {
		t.Errorf("drain once stored: %v", err)
	}
	select { // the drain waited for the handler, so for its store
	case released := <-gate.held:
		if !released {
			t.Error("the store was held 10 s, not released by the test")
		}
	default:
		t.Error("no store of the answer was seen (the finish script)")
	}
}

// storeGate holds the idempotency finish script (the keyed send's store
// of its answer, an EVALSHA with the answer and its TTL) until release,
// 10 s at most, so that a caller waiting for the store fails the test
// instead of hanging it.
type storeGate struct {
	release chan struct{}
	held    chan bool // whether release came
	once    sync.Once
}

func (g *storeGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *storeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.gate([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (g *storeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.gate(cmds)
		return next(ctx, cmds)
	}
}

// gate holds cmds when they store an answer: the finish script on an
// idempotency record (KEYS[1], ARGV token, answer, TTL), not in a MULTI
// (the claim, with as many arguments, rides in the limits').
func (g *storeGate) gate(cmds []redis.Cmder) {
	if cmds[0].Name() == "multi" {
		return
	}
	for _, c := range cmds {
		args := c.Args()
		if c.Name() != "evalsha" && c.Name() != "eval" || len(args) != 7 || !strings.Contains(fmt.Sprint(args[3]), ":idem:") {
			continue
		}
		g.once.Do(func() { g.held <- hold(g.release) })
	}
}

// dropSender sends no SMS.
type dropSender struct{}

func (dropSender) Send(context.Context, guard.Message) error { return nil }
