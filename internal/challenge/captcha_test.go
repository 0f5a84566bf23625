package challenge_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
)

const captchaPhone = "+447400100001"

// provider is a siteverify that answers body to every call (status 200)
// and counts the calls.
func provider(t *testing.T, body string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if r.PostFormValue("secret") != "s3cret" || r.PostFormValue("response") != "tok" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func newCaptcha(url string, edit func(*challenge.CaptchaOptions)) *challenge.Captcha {
	o := challenge.CaptchaOptions{Key: key, VerifyURL: url, Secret: "s3cret", SiteKey: "site-1",
		Expires: 5 * time.Minute, Hostnames: []string{"app.example", "www.app.example"}}
	if edit != nil {
		edit(&o)
	}
	return challenge.NewCaptcha(o)
}

// solution is a solution of a challenge just issued for captchaPhone.
func solution(t *testing.T, c *challenge.Captcha, now time.Time) string {
	t.Helper()
	ch, err := c.Issue(captchaPhone, now)
	if err != nil {
		t.Fatal(err)
	}
	return ch.ID + ".tok"
}

// outcome names what Confirm answered: "ok", "bad" (guard.ErrBadSolution)
// or "failed" (the provider's failure, 503).
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, guard.ErrBadSolution):
		return "bad"
	}
	return "failed"
}

// TestCaptchaJudgesTheAnswer: success alone does not pass a token; the
// answer's hostname, action and score are held to the options.
func TestCaptchaJudgesTheAnswer(t *testing.T) {
	withAction := func(o *challenge.CaptchaOptions) { o.Action = "otp_send" }
	withScore := func(o *challenge.CaptchaOptions) { o.MinScore = 0.5 }
	cases := []struct {
		name string
		body string
		edit func(*challenge.CaptchaOptions)
		want string
	}{
		{"success on a listed site", `{"success":true,"hostname":"app.example"}`, nil, "ok"},
		{"hostnames compare case aside", `{"success":true,"hostname":"WWW.App.Example"}`, nil, "ok"},
		{"refused", `{"success":false,"error-codes":["invalid-input-response"]}`, nil, "bad"},
		{"another site", `{"success":true,"hostname":"evil.example"}`, nil, "bad"},
		{"no hostname", `{"success":true}`, nil, "bad"},
		{"the action asked", `{"success":true,"hostname":"app.example","action":"otp_send"}`, withAction, "ok"},
		{"another action", `{"success":true,"hostname":"app.example","action":"login"}`, withAction, "bad"},
		{"no action", `{"success":true,"hostname":"app.example"}`, withAction, "bad"},
		{"a score above the minimum", `{"success":true,"hostname":"app.example","score":0.9}`, withScore, "ok"},
		{"a score below the minimum", `{"success":true,"hostname":"app.example","score":0.1}`, withScore, "bad"},
		{"no score, a minimum set", `{"success":true,"hostname":"app.example"}`, withScore, "ok"},
		{"a score and no minimum", `{"success":true,"hostname":"app.example","score":0.9}`, nil, "failed"},
		{"no success field", `{"hostname":"app.example"}`, nil, "failed"},
		{"not JSON", `<html>`, nil, "failed"},
	}
	now := time.Now()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := provider(t, tc.body)
			c := newCaptcha(srv.URL, tc.edit)
			if got := outcome(c.Confirm(context.Background(), solution(t, c, now), "203.0.113.7")); got != tc.want {
				t.Fatalf("answer %s: got %s, want %s", tc.body, got, tc.want)
			}
		})
	}
}

// TestCaptchaCheckAsksNobody: Check judges the ID alone; the provider is
// Confirm's.
func TestCaptchaCheckAsksNobody(t *testing.T) {
	srv, got := provider(t, `{"success":true,"hostname":"app.example"}`)
	c := newCaptcha(srv.URL, nil)
	now := time.Now()
	sol := solution(t, c, now)
	if _, err := c.Check(context.Background(), captchaPhone, sol, "", now); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if _, err := c.Check(context.Background(), "+447400100002", sol, "", now); !errors.Is(err, guard.ErrBadSolution) {
		t.Fatalf("Check for another number: %v, want ErrBadSolution", err)
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("provider calls: got %d, want 0", n)
	}
}

// TestCaptchaFollowsNoRedirect: a provider that redirects has failed; the
// secret never reaches the redirect's target, whose success would pass.
func TestCaptchaFollowsNoRedirect(t *testing.T) {
	target, reached := provider(t, `{"success":true,"hostname":"app.example"}`)
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL, code)
			}))
			t.Cleanup(srv.Close)
			c := newCaptcha(srv.URL, nil)
			if got := outcome(c.Confirm(context.Background(), solution(t, c, time.Now()), "")); got != "failed" {
				t.Fatalf("a %d: got %s, want failed", code, got)
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("calls reaching the redirect's target: got %d, want 0", n)
			}
		})
	}
}

// hung is a siteverify that answers nothing until the test ends; got
// counts the calls that reached it.
func hung(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var got atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return
	return srv, &got
}

// TestCaptchaTimeout: a provider that never answers is a failure once the
// timeout passes, not a request held until the client gives up.
func TestCaptchaTimeout(t *testing.T) {
	srv, _ := hung(t)
	c := newCaptcha(srv.URL, func(o *challenge.CaptchaOptions) { o.Timeout = 100 * time.Millisecond })
	done := make(chan error, 1)
	go func() { done <- c.Confirm(context.Background(), solution(t, c, time.Now()), "") }()
	select {
	case err := <-done:
		if got := outcome(err); got != "failed" {
			t.Fatalf("a hung provider: got %s (%v), want failed", got, err)
		}
	case <-time.After(time.Minute): // a deadlock guard, far past the timeout
		t.Fatal("Confirm still waits on a hung provider")
	}
}

// TestCaptchaProviderCallsBounded: with the bound's calls under way, one
// more fails at once without reaching the provider, on every Captcha that
// shares the bound (a reload's).
func TestCaptchaProviderCallsBounded(t *testing.T) {
	srv, got := hung(t)
	calls := challenge.NewProviderCalls(2)
	edit := func(o *challenge.CaptchaOptions) { o.Calls, o.Timeout = calls, 10*time.Second }
	c, reloaded := newCaptcha(srv.URL, edit), newCaptcha(srv.URL, edit)
	now := time.Now()
	held := make(chan error, 2)
	for range 2 {
		go func() { held <- c.Confirm(context.Background(), solution(t, c, now), "") }()
	}
	for got.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	for _, v := range []*challenge.Captcha{c, reloaded} {
		if out := outcome(v.Confirm(context.Background(), solution(t, v, now), "")); out != "failed" {
			t.Fatalf("a third call: got %s, want failed", out)
		}
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("calls reaching the provider: got %d, want 2", n)
	}
}
