// Package otpguardtest boots a real otpguard for the tests of the Go
// client, its middleware and the example apps: built by app.New as the
// binary builds it, on a real Redis (redistest: skipped without one,
// failed under OTPGUARD_REQUIRE_SERVICES=1), serving on a free port, with
// an SMS outbox and a count of the requests it received.
package otpguardtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The keys every instance takes.
const (
	APIKey = "otpguardtest-api-key-0123456789"
	OpsKey = "otpguardtest-ops-key-0123456789"
)

// Outbox is the SMS outbox each instance sends to (guardtest's).
type Outbox = guardtest.Outbox

// Server is one running otpguard.
type Server struct {
	URL    string
	Outbox *Outbox
	srv    *httptest.Server
	app    *app.App
	mu     sync.Mutex
	hits   map[string]int
}

// Hits is how many requests reached path.
func (s *Server) Hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// Stop stops serving and closes the instance: from then on its URL
// refuses connections.
func (s *Server) Stop() {
	s.srv.Close()
	s.app.Close()
}

// Start boots otpguard with the built-in policies, limits replaced by
// limits when not nil. It stops when the test ends.
func Start(t testing.TB, limits map[string]limit.Policy) *Server {
	t.Helper()
	pol := guard.DefaultPolicies()
	if limits != nil {
		pol.Limits = limits
	}
	return StartWith(t, pol, nil)
}

// StartWith boots otpguard with the policies pol (defaults filled in) and
// the configuration tune changes when not nil (a CAPTCHA provider, say).
// Codes go to the Outbox, unless tune sets SMS to "twilio" (with
// Twilio.BaseURL a fake of Twilio's API): then they go there. It stops
// when the test ends.
func StartWith(t testing.TB, pol guard.Policies, tune func(*config.Config)) *Server {
	t.Helper()
	rt := redistest.New(t)
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	// A generous Redis timeout: a CPU-starved round trip under -race is
	// not an outage.
	cfg.RedisURL, cfg.RedisPrefix, cfg.RedisTimeout = rt.URL, rt.Prefix, 5*time.Second
	cfg.APIKeys, cfg.OpsKeys = []string{APIKey}, []string{OpsKey}
	cfg.HMACKey = []byte("0123456789abcdef0123456789abcdef")
	cfg.DataDir, cfg.LogLevel = t.TempDir(), "error"
	pol.FillDefaults()
	cfg.Policies = pol
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	if tune != nil {
		tune(cfg)
	}
	s := &Server{Outbox: &Outbox{}, hits: map[string]int{}}
	opts := []app.Option{app.WithOutput(io.Discard)}
	if cfg.SMS != "twilio" { // tune chose Twilio (a fake of it): codes go there, the outbox stays empty
		opts = append(opts, app.WithSender(s.Outbox))
	}
	s.app, err = app.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	h := s.app.Handler()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Stop)
	s.URL = s.srv.URL
	return s
}
