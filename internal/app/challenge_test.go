package app

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
)

// TestCaptchaRefusedAtStart: New refuses a reCAPTCHA provider without a
// minimum score before anything starts.
func TestCaptchaRefusedAtStart(t *testing.T) {
	vars := map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": "https://www.google.com/recaptcha/api/siteverify",
		"OTPGUARD_CAPTCHA_SECRET": "s3cret", "OTPGUARD_CAPTCHA_SITE_KEY": "site-1", "OTPGUARD_CAPTCHA_HOSTNAMES": "example.com",
		"OTPGUARD_DATA_DIR": t.TempDir()}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policies.OTP.Challenge.Type = guard.ChallengeCaptcha
	a, err := New(context.Background(), cfg, WithOutput(io.Discard))
	if err == nil {
		a.Close()
		t.Fatal("New started a reCAPTCHA provider without OTPGUARD_CAPTCHA_MIN_SCORE")
	}
	if !strings.Contains(err.Error(), "OTPGUARD_CAPTCHA_MIN_SCORE") {
		t.Fatalf("New: %v, want an error naming OTPGUARD_CAPTCHA_MIN_SCORE", err)
	}
}
