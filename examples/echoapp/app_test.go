package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client/limitmw"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// The app against a real otpguard (app.New, on a real Redis, in process,
// on a free port), itself served on a free port.

func searchPolicy() map[string]limit.Policy {
	return map[string]limit.Policy{
		"search": {Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour, OnStoreError: limit.FallbackOpen},
	}
}

func startApp(t *testing.T, otpguardURL string, failure limitmw.Failure) *httptest.Server {
	t.Helper()
	e, err := newApp(config{OTPGuardURL: otpguardURL, APIKey: otpguardtest.APIKey, Policy: "search",
		OnUnavailable: failure, CheckTimeout: 10 * time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func call(t *testing.T, method, url, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, header: res.Header}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("%s %s: body %q is not JSON", method, url, b)
	}
	return a
}

func TestSearchIsLimited(t *testing.T) {
	g := otpguardtest.Start(t, searchPolicy())
	app := startApp(t, g.URL, limitmw.FailClosed)

	for i := range 3 {
		a := call(t, "GET", app.URL+"/search?q=shoes", "")
		if a.status != 200 {
			t.Fatalf("search %d: %d %v", i+1, a.status, a.body)
		}
		if got, want := a.header.Get("RateLimit"), `"search";r=`+string(rune('2'-i))+`;t=3600`; got != want {
			t.Errorf("search %d: RateLimit %q, want %q", i+1, got, want)
		}
		if got := a.header.Get("RateLimit-Policy"); got != `"search";q=3;w=3600` {
			t.Errorf("search %d: RateLimit-Policy %q", i+1, got)
		}
	}
	checks := g.Hits("/limits/check")
	for i := range 10 {
		a := call(t, "GET", app.URL+"/search?q=shoes", "")
		if a.status != 429 || a.body["code"] != "rate_limited" || a.body["policy"] != "search" {
			t.Fatalf("search %d: %d %v, want 429 rate_limited", i+4, a.status, a.body)
		}
		if a.header.Get("Content-Type") != "application/problem+json" || a.header.Get("Retry-After") == "" ||
			!strings.HasPrefix(a.header.Get("RateLimit"), `"search";r=0;`) {
			t.Errorf("search %d: headers %v", i+4, a.header)
		}
	}
	if n := g.Hits("/limits/check") - checks; n != 1 {
		t.Errorf("10 denied searches asked otpguard %d times, want 1 (the rest from the client's memory)", n)
	}
}

func TestSignIn(t *testing.T) {
	g := otpguardtest.Start(t, searchPolicy())
	app := startApp(t, g.URL, limitmw.FailOpen)
	const phone = "+919800000000"

	a := call(t, "POST", app.URL+"/login/code", `{"phone":"+91 98000 00000"}`)
	if a.status != 200 || a.body["sent_to"] != phone {
		t.Fatalf("send: %d %v", a.status, a.body)
	}
	a = call(t, "POST", app.URL+"/login/code", `{"phone":"+919800000000"}`)
	if a.status != 429 || a.body["reason"] != "cooldown" || a.header.Get("Retry-After") != "30" {
		t.Errorf("second send: %d %v Retry-After %q, want 429 cooldown, 30", a.status, a.body, a.header.Get("Retry-After"))
	}
	a = call(t, "POST", app.URL+"/login/verify", `{"phone":"+919800000000","code":"000000"}`)
	if a.status != 401 || a.body["reason"] != "wrong_code" {
		t.Errorf("wrong code: %d %v", a.status, a.body)
	}
	a = call(t, "POST", app.URL+"/login/verify", `{"phone":"+919800000000","code":"`+g.Outbox.LastCode(t, phone)+`"}`)
	if a.status != 200 || a.body["signed_in"] != true {
		t.Errorf("right code: %d %v", a.status, a.body)
	}
	if g.Outbox.Count() != 1 {
		t.Errorf("SMS sent: %d, want 1", g.Outbox.Count())
	}
}

func TestOTPGuardStopped(t *testing.T) {
	g := otpguardtest.Start(t, searchPolicy())
	open := startApp(t, g.URL, limitmw.FailOpen)
	closed := startApp(t, g.URL, limitmw.FailClosed)
	for _, app := range []*httptest.Server{open, closed} {
		if a := call(t, "GET", app.URL+"/search", ""); a.status != 200 || a.header.Get("RateLimit") == "" {
			t.Fatalf("with otpguard up: %d %v", a.status, a.header)
		}
	}
	g.Stop()

	a := call(t, "GET", open.URL+"/search", "")
	if a.status != 200 || a.header.Get("RateLimit") != "" {
		t.Errorf("fail open, otpguard stopped: %d RateLimit %q; want 200 without limit headers", a.status, a.header.Get("RateLimit"))
	}
	a = call(t, "GET", closed.URL+"/search", "")
	if a.status != 503 || a.body["code"] != "limiter_unavailable" || a.header.Get("Retry-After") != "5" {
		t.Errorf("fail closed, otpguard stopped: %d %v; want 503 limiter_unavailable", a.status, a.body)
	}
	a = call(t, "POST", open.URL+"/login/code", `{"phone":"+919800000000"}`)
	if a.status != 503 {
		t.Errorf("sign-in with otpguard stopped: %d %v, want 503", a.status, a.body)
	}
}

func TestConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := configFrom(env(nil)); err == nil {
		t.Error("no API key: no error")
	}
	c, err := configFrom(env(map[string]string{"OTPGUARD_API_KEY": "k", "ECHOAPP_ON_UNAVAILABLE": "closed", "ECHOAPP_CHECK_TIMEOUT": "250ms"}))
	if err != nil || c.OnUnavailable != limitmw.FailClosed || c.CheckTimeout != 250*time.Millisecond || c.Policy != "search" {
		t.Errorf("configFrom = %+v, %v", c, err)
	}
	if _, err := configFrom(env(map[string]string{"OTPGUARD_API_KEY": "k", "ECHOAPP_ON_UNAVAILABLE": "maybe"})); err == nil {
		t.Error("a bad choice: no error")
	}
}
