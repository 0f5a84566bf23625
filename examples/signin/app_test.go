package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	otpconfig "github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
)

// TestVendoredAltcha holds the vendored widget to the npm package's files
// (static/altcha/README.md): unmodified, with its licence beside it.
func TestVendoredAltcha(t *testing.T) {
	want := map[string]string{
		"static/altcha/altcha.min.js": "71b2d6829de9893e5d6bfc806d343b2c7dead04b2157ff2a5ba3372938c3a6be",
		"static/altcha/LICENSE.txt":   "bee1fb9d9c97d42c12c22332c5250f2fb1ef5c2321f6f82beb23e3b77be50a29",
	}
	readme, err := os.ReadFile("static/altcha/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, sum := range want {
		b, err := static.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("%s: SHA-256 %x, want %s (npm altcha 3.2.2's file, unmodified)", name, got, sum)
		}
		if !strings.Contains(string(readme), sum) {
			t.Errorf("static/altcha/README.md does not list %s's sum %s", name, sum)
		}
	}
}

// TestPageServed: the page and the widget are served, and the stand-in's
// siteverify only when asked for.
func TestPageServed(t *testing.T) {
	for _, captcha := range []string{captchaTurnstile, captchaStandIn} {
		h, err := newApp(config{OTPGuardURL: "http://127.0.0.1:1", APIKey: "k", Captcha: captcha}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		files := map[string]string{"/": `src="/static/altcha/altcha.min.js"`, "/static/signin.js": "altcha-widget",
			"/static/altcha/altcha.min.js": "altcha-widget", "/static/standin-captcha.js": "Stand-in CAPTCHA"}
		for path, want := range files {
			res, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !strings.Contains(string(b), want) {
				t.Errorf("GET %s: %d, body without %q", path, res.StatusCode, want)
			}
		}
		res, err := http.PostForm(srv.URL+"/standin/siteverify", url.Values{"secret": {"s"}, "response": {"standin-pass-00"}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch captcha {
		case captchaStandIn:
			if res.StatusCode != 200 || !strings.Contains(string(b), `"success":true`) {
				t.Errorf("stand-in siteverify: %d %s", res.StatusCode, b)
			}
		default:
			if res.StatusCode == 200 {
				t.Errorf("with SIGNIN_CAPTCHA=%s the stand-in's siteverify answers: %s", captcha, b)
			}
		}
	}
}

func TestConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := configFrom(env(nil)); err == nil {
		t.Error("no API key: no error")
	}
	c, err := configFrom(env(map[string]string{"OTPGUARD_API_KEY": "k"}))
	if err != nil || c.Captcha != captchaTurnstile || c.OTPGuardURL != "http://127.0.0.1:8080" {
		t.Errorf("configFrom = %+v, %v", c, err)
	}
	if _, err := configFrom(env(map[string]string{"OTPGUARD_API_KEY": "k", "SIGNIN_CAPTCHA": "recaptcha"})); err == nil {
		t.Error("an unknown widget: no error")
	}
}

// TestTryPolicies: the policy file of the README's try-it-by-hand steps
// loads, and makes a country's second new number meet a challenge.
func TestTryPolicies(t *testing.T) {
	cfg, err := otpconfig.Load(func(k string) string {
		return map[string]string{"OTPGUARD_CONFIG": "policies.yaml"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatal(err)
	}
	otp := cfg.Policies.OTP
	if otp.CountryVelocity.Floor != 1 || otp.Challenge.Type != guard.ChallengePoW || otp.Challenge.MaxNumber != guard.DefaultChallengeMaxNumber {
		t.Errorf("policies.yaml: velocity floor %d, challenge %+v; want floor 1 and the default proof of work", otp.CountryVelocity.Floor, otp.Challenge)
	}
}
