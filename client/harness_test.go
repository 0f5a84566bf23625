package client_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The tests of this file's callers run the client against a real
// otpguard, built by app.New as the binary builds it, on a real Redis.

const (
	apiKey = "client-test-api-key-0123456789"
	opsKey = "client-test-ops-key-0123456789"
)

// outbox is a guard.Sender that keeps what it was asked to send.
type outbox struct {
	mu   sync.Mutex
	sent []guard.Message
}

func (o *outbox) Send(_ context.Context, m guard.Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sent = append(o.sent, m)
	return nil
}

func (o *outbox) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sent)
}

// lastCode is the code of the last message sent to phone.
func (o *outbox) lastCode(t *testing.T, phone string) string {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.sent) - 1; i >= 0; i-- {
		if o.sent[i].To == phone {
			f := strings.Fields(o.sent[i].Body)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no message was sent to %s", phone)
	return ""
}

// otpguard is one real instance, serving on a free port, with a count of
// the requests it received per path.
type otpguard struct {
	URL  string
	out  *outbox
	mu   sync.Mutex
	hits map[string]int
	all  atomic.Int64
}

func (g *otpguard) hitsOn(path string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hits[path]
}

// startOTPGuard boots otpguard on a real Redis (skipped without one,
// failed under OTPGUARD_REQUIRE_SERVICES=1) with the limit policies
// given (the built-in ones when nil).
func startOTPGuard(t *testing.T, limits map[string]guard.LimitPolicy) *otpguard {
	t.Helper()
	rt := redistest.New(t)
	cfg, err := app.LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	// A generous Redis timeout: a CPU-starved round trip under -race is not
	// an outage.
	cfg.RedisURL, cfg.RedisPrefix, cfg.RedisTimeout = rt.URL, rt.Prefix, 5*time.Second
	cfg.APIKeys, cfg.OpsKeys = []string{apiKey}, []string{opsKey}
	cfg.HMACKey = []byte("0123456789abcdef0123456789abcdef")
	cfg.DataDir, cfg.LogLevel = t.TempDir(), "error"
	pol := guard.DefaultPolicies()
	if limits != nil {
		pol.Limits = limits
	}
	pol.FillDefaults()
	cfg.Policies = pol
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	g := &otpguard{out: &outbox{}, hits: map[string]int{}}
	a, err := app.New(context.Background(), cfg, app.WithSender(g.out), app.WithOutput(io.Discard))
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	h := a.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.hits[r.URL.Path]++
		g.mu.Unlock()
		g.all.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); a.Close() })
	g.URL = srv.URL
	return g
}

// newClient returns a client of g with both keys.
func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithAPIKey(apiKey), client.WithOpsKey(opsKey)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
