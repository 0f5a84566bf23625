package limitmw_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/client/limitmw"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

func policies() map[string]limit.Policy {
	return map[string]limit.Policy{
		"per_ip":   {Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour, OnStoreError: limit.FallbackOpen},
		"per_user": {Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour, OnStoreError: limit.FallbackOpen},
	}
}

func newLimiter(t *testing.T, url string, opts limitmw.Options) *limitmw.Limiter {
	t.Helper()
	c, err := client.New(url, client.WithAPIKey(otpguardtest.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second // a busy machine under -race is no outage
	}
	l, err := limitmw.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })

func get(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/hello", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestLimitsAgainstOTPGuard(t *testing.T) {
	g := otpguardtest.Start(t, policies())
	l := newLimiter(t, g.URL, limitmw.Options{OnUnavailable: limitmw.FailClosed})
	h := l.Handler(hello,
		limitmw.Rule{Policy: "per_ip", Key: limitmw.ClientIP},
		limitmw.Rule{Policy: "per_user", Key: limitmw.Header("X-User", "user:")})

	for i := range 3 {
		w := get(h, "203.0.113.7:5000")
		if w.Code != 200 || w.Body.String() != "hello" {
			t.Fatalf("request %d: %d %q, want 200 hello", i+1, w.Code, w.Body)
		}
		if got, want := w.Header().Get("RateLimit"), `"per_ip";r=`+string(rune('2'-i))+`;t=3600`; got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i+1, got, want)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"per_ip";q=3;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	hits := g.Hits("/limits/check")
	for i := range 5 {
		w := get(h, "203.0.113.7:5001", "X-User", "42")
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d over the limit: %d, want 429", i+4, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q", ct)
		}
		var p struct {
			Status     int    `json:"status"`
			Code       string `json:"code"`
			RetryAfter int    `json:"retry_after"`
			Policy     string `json:"policy"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 429 || p.Code != "rate_limited" ||
			p.Policy != "per_ip" || p.RetryAfter < 3500 {
			t.Errorf("429 body %s (%v)", w.Body, err)
		}
		if ra := w.Header().Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After %q", ra)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"per_ip";q=3;w=3600` {
			t.Errorf("429 RateLimit-Policy %q", got)
		}
		if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"per_ip";r=0;t=`) {
			t.Errorf("429 RateLimit %q", got)
		}
	}
	// The first denial asked otpguard; the four after it came from memory.
	if n := g.Hits("/limits/check") - hits; n != 1 {
		t.Errorf("5 denied requests made %d checks, want 1", n)
	}
	// Another address is its own key; an IPv6 address counts by its /64.
	if w := get(h, "[2001:db8::1]:5000"); w.Code != 200 {
		t.Errorf("another address: %d", w.Code)
	}
	for range 2 {
		get(h, "[2001:db8::2]:5000")
	}
	if w := get(h, "[2001:db8::ffff]:5000"); w.Code != 429 {
		t.Errorf("4th request from one /64: %d, want 429", w.Code)
	}
}

func TestFailureChoice(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) }) // first: let hang's handlers end
	live := otpguardtest.Start(t, policies())
	// Stopped last, so that no listener of this test can take its port
	// again: a stopped otpguard's connections are refused.
	g := otpguardtest.Start(t, policies())
	url := g.URL
	g.Stop()

	tests := []struct {
		name     string
		url      string
		policy   string
		choice   limitmw.Failure
		timeout  time.Duration
		wantCode int
	}{
		{"stopped, fail open", url, "per_ip", limitmw.FailOpen, 0, 200},
		{"stopped, fail closed", url, "per_ip", limitmw.FailClosed, 0, 503},
		{"no answer within the timeout, fail open", hang.URL, "per_ip", limitmw.FailOpen, 50 * time.Millisecond, 200},
		{"no answer within the timeout, fail closed", hang.URL, "per_ip", limitmw.FailClosed, 50 * time.Millisecond, 503},
		{"unknown policy, fail closed", live.URL, "nope", limitmw.FailClosed, 0, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var errs []error
			l := newLimiter(t, tt.url, limitmw.Options{OnUnavailable: tt.choice, Timeout: tt.timeout,
				OnError: func(_ *http.Request, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
			w := get(l.Handler(hello, limitmw.Rule{Policy: tt.policy, Key: limitmw.ClientIP}), "203.0.113.7:5000")
			if w.Code != tt.wantCode {
				t.Fatalf("status %d, want %d", w.Code, tt.wantCode)
			}
			if w.Header().Get("RateLimit") != "" {
				t.Errorf("RateLimit %q without a decision", w.Header().Get("RateLimit"))
			}
			if tt.wantCode == 503 {
				if !strings.Contains(w.Body.String(), `"code":"limiter_unavailable"`) || w.Header().Get("Retry-After") != "5" {
					t.Errorf("503: %s, Retry-After %q", w.Body, w.Header().Get("Retry-After"))
				}
			}
			if len(errs) != 1 {
				t.Errorf("OnError told %d errors, want 1", len(errs))
			}
		})
	}
}

func TestNewNeedsAChoice(t *testing.T) {
	c, _ := client.New("http://127.0.0.1:1")
	if _, err := limitmw.New(c, limitmw.Options{}); err == nil {
		t.Error("New without OnUnavailable: no error")
	}
}

func TestNoRuleApplies(t *testing.T) {
	l := newLimiter(t, "http://127.0.0.1:1", limitmw.Options{OnUnavailable: limitmw.FailClosed})
	w := get(l.Handler(hello, limitmw.Rule{Policy: "per_user", Key: limitmw.Header("X-User", "user:")}), "203.0.113.7:5000")
	if w.Code != 200 {
		t.Errorf("no key for any rule: %d, want 200 with no check", w.Code)
	}
}

func TestKeys(t *testing.T) {
	long := strings.Repeat("a", 129)
	tests := []struct{ in, want string }{
		{"user:42", "user:42"},
		{"ip:2001:db8::/64", "ip:2001:db8::/64"},
		{strings.Repeat("a", 128), strings.Repeat("a", 128)},
	}
	for _, tt := range tests {
		if got := limitmw.SafeKey(tt.in); got != tt.want {
			t.Errorf("SafeKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, in := range []string{"", "has space", "émile", long, "GET /items/{id}"} {
		got := limitmw.SafeKey(in)
		if !strings.HasPrefix(got, "h:") || got != limitmw.SafeKey(in) || limitmw.SafeKey(got) != got {
			t.Errorf("SafeKey(%q) = %q, want a stable digest key", in, got)
		}
	}
	if limitmw.SafeKey("a b") == limitmw.SafeKey("a c") {
		t.Error("two keys share a digest")
	}
	for in, want := range map[string]string{
		"203.0.113.7": "ip:203.0.113.7", "::ffff:203.0.113.7": "ip:203.0.113.7",
		"2001:db8:1:2:3:4:5:6": "ip:2001:db8:1:2::/64", "fe80::1%eth0": "ip:fe80::/64", "nonsense": "",
	} {
		if got := limitmw.IPKey(in); got != want {
			t.Errorf("IPKey(%q) = %q, want %q", in, got, want)
		}
	}
	if limitmw.FailOpen.String() != "fail_open" || limitmw.FailClosed.String() != "fail_closed" {
		t.Error("Failure names")
	}
}
