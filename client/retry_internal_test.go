package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer answers each request with the next of its handlers (the last
// one repeats) and counts requests and new connections.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex
	handlers []http.HandlerFunc
	hits     atomic.Int64
	conns    atomic.Int64
}

func newFakeServer(t *testing.T, handlers ...http.HandlerFunc) *fakeServer {
	f := &fakeServer{handlers: handlers}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := f.hits.Add(1)
		f.mu.Lock()
		h := f.handlers[min(int(n)-1, len(f.handlers)-1)]
		f.mu.Unlock()
		h(w, r)
	}))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

func status(code int, retryAfter string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// hangUp cuts the connection without an answer: a network error.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

const (
	denyOK          = `{"id":1,"pattern":"+91981110","reason":"pumping","author":"ops:1","created_at":"2026-12-03T09:00:00Z"}`
	overrideOK      = `{"id":1,"kind":"prefix_limit","subject":"+91981","limit":5,"reason":"wave","author":"ops:1","created_at":"2026-12-03T09:00:00Z","expires_at":"2026-12-04T09:00:00Z","expires_in_seconds":86400}`
	overrideRefused = `{"type":"urn:otpguard:problem:invalid_request","status":400,"code":"invalid_request","detail":"reason: required","field":"reason"}`
	sendOK          = `{"status":"pending","phone":"+919800000000","expires_in":300,"verification_id":"ver_1"}`
	unavailable     = `{"type":"urn:otpguard:problem:overloaded","title":"Service Unavailable","status":503,"detail":"busy","code":"overloaded","retry_after":1}`
)

// testClient is a client of f whose waits are recorded, not slept.
func testClient(t *testing.T, f *fakeServer, opts ...Option) (*Client, *[]time.Duration) {
	c, err := New(f.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	return c, &waits
}

func TestRetries(t *testing.T) {
	get := func(c *Client, ctx context.Context) error { _, err := c.Verification(ctx, "ver_1"); return err }
	verOK := status(200, "", `{"verification_id":"ver_1","status":"pending"}`)
	tests := []struct {
		name      string
		handlers  []http.HandlerFunc
		call      func(*Client, context.Context) error
		ctx       func() (context.Context, context.CancelFunc)
		wantHits  int64
		wantErr   string // the code, "net" for a network error, "" for none
		wantWaits []time.Duration
	}{
		{name: "GET retried on 503 with Retry-After", handlers: []http.HandlerFunc{status(503, "1", unavailable), verOK},
			call: get, wantHits: 2, wantWaits: []time.Duration{time.Second}},
		{name: "GET retried on a network error", handlers: []http.HandlerFunc{hangUp, hangUp, verOK},
			call: get, wantHits: 3},
		{name: "GET gives up after the attempts", handlers: []http.HandlerFunc{hangUp},
			call: get, wantHits: 3, wantErr: "net"},
		{name: "GET not retried on 503 without Retry-After", handlers: []http.HandlerFunc{status(503, "", `{"code":"overloaded","status":503}`), verOK},
			call: get, wantHits: 1, wantErr: "overloaded"},
		{name: "GET not retried past the longest wait", handlers: []http.HandlerFunc{status(503, "60", unavailable), verOK},
			call: get, wantHits: 1, wantErr: "overloaded"},
		{name: "GET not retried when the deadline is nearer than Retry-After",
			handlers: []http.HandlerFunc{status(503, "1", unavailable), verOK}, call: get,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 500*time.Millisecond)
			},
			wantHits: 1, wantErr: "overloaded"},
		{name: "GET not retried on 404", handlers: []http.HandlerFunc{status(404, "", `{"code":"verification_not_found","status":404}`)},
			call: get, wantHits: 1, wantErr: "verification_not_found"},
		{name: "Send without a key never retried", handlers: []http.HandlerFunc{hangUp, status(200, "", sendOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Send(ctx, SendRequest{Phone: "+919800000000"})
				return err
			}, wantHits: 1, wantErr: "net"},
		{name: "Send with a key retried on a network error", handlers: []http.HandlerFunc{hangUp, status(200, "", sendOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Send(ctx, SendRequest{Phone: "+919800000000", IdempotencyKey: "k"})
				return err
			}, wantHits: 2},
		{name: "Send with a key retried while in progress",
			handlers: []http.HandlerFunc{status(409, "1", `{"code":"idempotency_key_in_progress","status":409}`), status(200, "", sendOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Send(ctx, SendRequest{Phone: "+919800000000", IdempotencyKey: "k"})
				return err
			}, wantHits: 2, wantWaits: []time.Duration{time.Second}},
		{name: "Send with a key not retried on 429", handlers: []http.HandlerFunc{status(429, "30", `{"code":"cooldown","status":429}`)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Send(ctx, SendRequest{Phone: "+919800000000", IdempotencyKey: "k"})
				return err
			}, wantHits: 1, wantErr: "cooldown"},
		{name: "Verify never retried", handlers: []http.HandlerFunc{hangUp, status(200, "", `{"valid":true}`)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Verify(ctx, VerifyRequest{Phone: "+919800000000", Code: "123456"})
				return err
			}, wantHits: 1, wantErr: "net"},
		{name: "Check never retried", handlers: []http.HandlerFunc{status(503, "1", unavailable)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Check(ctx, Check{Policy: "p", Key: "k"})
				return err
			}, wantHits: 1, wantErr: "overloaded"},
		{name: "Deny retried on a network error", handlers: []http.HandlerFunc{hangUp, status(201, "", denyOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.Deny(ctx, DenyRequest{Pattern: "+91981110", Reason: "pumping"})
				return err
			}, wantHits: 2},
		{name: "AddOverride retried on a network error", handlers: []http.HandlerFunc{hangUp, status(201, "", overrideOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.AddOverride(ctx, OverrideRequest{Kind: OverridePrefixLimit, Subject: "+91981", Limit: 5, Reason: "wave"})
				return err
			}, wantHits: 2},
		{name: "AddOverride retried on 503 with Retry-After", handlers: []http.HandlerFunc{status(503, "1", unavailable), status(201, "", overrideOK)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.AddOverride(ctx, OverrideRequest{Kind: OverridePrefixLimit, Subject: "+91981", Limit: 5, Reason: "wave"})
				return err
			}, wantHits: 2, wantWaits: []time.Duration{time.Second}},
		{name: "AddOverride not retried on a refusal", handlers: []http.HandlerFunc{status(400, "", overrideRefused)},
			call: func(c *Client, ctx context.Context) error {
				_, err := c.AddOverride(ctx, OverrideRequest{Kind: OverridePrefixLimit, Subject: "+91981", Limit: 5})
				return err
			}, wantHits: 1, wantErr: "invalid_request"},
		{name: "ops DELETE never retried", handlers: []http.HandlerFunc{hangUp, status(204, "", "")},
			call: func(c *Client, ctx context.Context) error { return c.RemoveDeny(ctx, 7) }, wantHits: 1, wantErr: "net"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, tt.handlers...)
			c, waits := testClient(t, f)
			ctx := context.Background()
			if tt.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tt.ctx()
				defer cancel()
			}
			err := tt.call(c, ctx)
			if got := f.hits.Load(); got != tt.wantHits {
				t.Errorf("requests: got %d, want %d", got, tt.wantHits)
			}
			switch tt.wantErr {
			case "":
				if err != nil {
					t.Errorf("err = %v, want none", err)
				}
			case "net":
				var te *transportError
				if !errors.As(err, &te) || !IsUnavailable(err) {
					t.Errorf("err = %v, want a network error", err)
				}
			default:
				if !IsCode(err, tt.wantErr) {
					t.Errorf("err = %v, want code %s", err, tt.wantErr)
				}
			}
			if tt.wantWaits != nil {
				if len(*waits) != len(tt.wantWaits) {
					t.Fatalf("waits %v, want %v", *waits, tt.wantWaits)
				}
				for i, w := range tt.wantWaits {
					if (*waits)[i] != w {
						t.Errorf("wait %d: %v, want %v", i, (*waits)[i], w)
					}
				}
			}
		})
	}
}

func TestIdempotentSendsOption(t *testing.T) {
	var keys []string
	f := newFakeServer(t, hangUp, func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.Header().Set("Idempotent-Replayed", "true")
		status(200, "", sendOK)(w, r)
	})
	c, _ := testClient(t, f, WithIdempotentSends())
	res, err := c.Send(context.Background(), SendRequest{Phone: "+919800000000"})
	if err != nil || !res.Replayed || res.VerificationID != "ver_1" {
		t.Fatalf("Send = %+v, %v", res, err)
	}
	if f.hits.Load() != 2 || len(keys) != 1 || len(keys[0]) < 16 {
		t.Errorf("hits %d, keys %q: want a retry carrying a generated key", f.hits.Load(), keys)
	}
}

// TestOpsWritesCarryAKeyPerCall: Deny and AddOverride send an
// Idempotency-Key on every call, the same on each attempt of one call (so
// otpguard replays the first answer), a new one for the next call, and
// the caller's own when it gives one.
func TestOpsWritesCarryAKeyPerCall(t *testing.T) {
	calls := []struct {
		name string
		ok   string
		call func(c *Client, key string) error
	}{
		{"Deny", denyOK, func(c *Client, key string) error {
			_, err := c.Deny(context.Background(), DenyRequest{Pattern: "+91981110", IdempotencyKey: key})
			return err
		}},
		{"AddOverride", overrideOK, func(c *Client, key string) error {
			_, err := c.AddOverride(context.Background(), OverrideRequest{Kind: OverrideBudgetHour, Limit: 5, Reason: "wave", IdempotencyKey: key})
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			record := func(next http.HandlerFunc) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					keys = append(keys, r.Header.Get("Idempotency-Key"))
					next(w, r)
				}
			}
			// Each call's first attempt loses its answer; the retry gets it.
			ok := status(201, "", tc.ok)
			f := newFakeServer(t, record(hangUp), record(ok), record(hangUp), record(ok), record(ok))
			c, _ := testClient(t, f)
			for i, key := range []string{"", "", "job-7"} {
				if err := tc.call(c, key); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if len(keys) != 5 {
				t.Fatalf("keys %q: want 5 requests", keys)
			}
			if keys[0] == "" || len(keys[0]) < 16 || keys[1] != keys[0] {
				t.Errorf("first call: keys %q, %q; want one generated key on both attempts", keys[0], keys[1])
			}
			if keys[2] == "" || keys[2] != keys[3] || keys[2] == keys[0] {
				t.Errorf("second call: keys %q, %q; want a new generated key on both attempts (first call's %q)", keys[2], keys[3], keys[0])
			}
			if keys[4] != "job-7" {
				t.Errorf("third call: key %q, want the caller's job-7", keys[4])
			}
		})
	}
}

func TestDeadlineHonoured(t *testing.T) {
	release := make(chan struct{})
	f := newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	c, _ := testClient(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Verification(ctx, "ver_1")
	if !errors.Is(err, context.DeadlineExceeded) || !IsUnavailable(err) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if f.hits.Load() != 1 {
		t.Errorf("requests: %d, want 1 (the caller's deadline is not retried)", f.hits.Load())
	}
}

func TestConnectionReuse(t *testing.T) {
	big := make([]byte, 100<<10) // a body the client does not read in full
	for i := range big {
		big[i] = 'x'
	}
	f := newFakeServer(t,
		status(200, "", `{"verification_id":"ver_1"}`),
		status(404, "", `{"code":"verification_not_found","status":404}`),
		status(502, "", "<html>bad gateway</html>"),
		status(200, "", `{"verification_id":"ver_1","extra":"`+string(big[:60<<10])+`"}`),
		status(200, "", `{"verification_id":"ver_1"}`),
	)
	c, _ := testClient(t, f, WithRetries(0, 0))
	for range 5 {
		_, _ = c.Verification(context.Background(), "ver_1")
	}
	if f.hits.Load() != 5 || f.conns.Load() != 1 {
		t.Errorf("%d requests over %d connections, want 5 over 1", f.hits.Load(), f.conns.Load())
	}
}

func TestNotProblemDetails(t *testing.T) {
	f := newFakeServer(t, status(502, "", "<html>bad gateway</html>"))
	c, _ := testClient(t, f, WithRetries(0, 0))
	_, err := c.Verification(context.Background(), "ver_1")
	var e *Error
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "" || !IsUnavailable(err) {
		t.Fatalf("err = %#v, want a 502 *Error without a code", err)
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "otpguard:8080", "ftp://x", "http://"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
}
