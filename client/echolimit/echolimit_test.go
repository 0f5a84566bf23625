package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/client/echolimit"
	"github.com/otpguard/otpguard/client/limitmw"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

func TestMiddlewareAgainstOTPGuard(t *testing.T) {
	g := otpguardtest.Start(t, map[string]limit.Policy{
		"per_user": {Algorithm: limit.FixedWindow, Limit: 2, Window: time.Hour, OnStoreError: limit.FallbackOpen},
	})
	c, err := client.New(g.URL, client.WithAPIKey(otpguardtest.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limitmw.New(c, limitmw.Options{OnUnavailable: limitmw.FailClosed, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	// A sign-in middleware before the limit: the user ID from a header.
	signIn := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("user", u)
			}
			return next(c)
		}
	}
	e.GET("/items/:id", func(c echo.Context) error { return c.String(200, "item "+c.Param("id")) }, signIn,
		echolimit.Middleware(lim, echolimit.Rule{Policy: "per_user", Key: echolimit.Join(echolimit.Get("user", "user:"), echolimit.Route)}))

	do := func(user, id string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/items/"+id, nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	// One limit per user and route, whatever the item: 2, then 429.
	for i, id := range []string{"1", "2"} {
		if w := do("alice", id); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"per_user";q=2;w=3600` {
			t.Fatalf("request %d: %d %v", i+1, w.Code, w.Header())
		}
	}
	w := do("alice", "3")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"code":"rate_limited"`) || w.Header().Get("Retry-After") == "" {
		t.Errorf("3rd: %d %s %v, want 429 rate_limited", w.Code, w.Body, w.Header())
	}
	if w := do("bob", "3"); w.Code != 200 {
		t.Errorf("another user: %d, want 200", w.Code)
	}
	// No user signed in: the rule is skipped, nothing is asked.
	before := g.Hits("/limits/check")
	if w := do("", "3"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("no user: %d %v, want 200 unchecked", w.Code, w.Header())
	}
	if g.Hits("/limits/check") != before {
		t.Error("a skipped rule asked otpguard")
	}
}

func TestKeys(t *testing.T) {
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect()
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	r.RemoteAddr = "[2001:db8:1:2:3::9]:443"
	c := e.NewContext(r, httptest.NewRecorder())
	c.SetPath("/items/:id")
	c.Set("n", 42)
	c.Set("s", "abc")
	tests := []struct {
		name string
		key  func(echo.Context) string
		want string
	}{
		{"RealIP", echolimit.RealIP, "ip:2001:db8:1:2::/64"},
		{"Route", echolimit.Route, "route:POST:/items/:id"},
		{"Get int", echolimit.Get("n", "user:"), "user:42"},
		{"Get string", echolimit.Get("s", "user:"), "user:abc"},
		{"Get missing", echolimit.Get("none", "user:"), ""},
		{"Join", echolimit.Join(echolimit.Get("s", "u:"), echolimit.Route), "u:abc/route:POST:/items/:id"},
		{"Join missing", echolimit.Join(echolimit.Get("none", "u:"), echolimit.Route), ""},
	}
	for _, tt := range tests {
		if got := tt.key(c); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, got, tt.want)
		}
	}
}
