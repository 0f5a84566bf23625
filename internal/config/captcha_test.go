package config

import (
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestCaptchaSettings: what Validate (config check, and start-up) says of
// the CAPTCHA settings: a score-based provider needs its minimum, type
// captcha needs the sites its tokens come from, and each number is held
// to its range.
func TestCaptchaSettings(t *testing.T) {
	const turnstile, recaptcha = "https://challenges.cloudflare.com/turnstile/v0/siteverify", "https://www.google.com/recaptcha/api/siteverify"
	for _, tc := range []struct {
		name string
		vars map[string]string
		err  string // "": valid
	}{
		{"turnstile", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile}, ""},
		{"reCAPTCHA with a minimum score", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": recaptcha, "OTPGUARD_CAPTCHA_MIN_SCORE": "0.5"}, ""},
		{"reCAPTCHA without one", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": recaptcha}, "OTPGUARD_CAPTCHA_MIN_SCORE: required with reCAPTCHA"},
		{"recaptcha.net without one", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": "https://www.recaptcha.net/recaptcha/api/siteverify"}, "OTPGUARD_CAPTCHA_MIN_SCORE: required"},
		{"a minimum score with another provider", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": "https://api.hcaptcha.com/siteverify", "OTPGUARD_CAPTCHA_MIN_SCORE": "0.5"}, "OTPGUARD_CAPTCHA_MIN_SCORE: scores are read as reCAPTCHA's"},
		{"no hostnames", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile, "OTPGUARD_CAPTCHA_HOSTNAMES": ""}, "needs OTPGUARD_CAPTCHA_HOSTNAMES"},
		{"a score above 1", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile, "OTPGUARD_CAPTCHA_MIN_SCORE": "1.5"}, "OTPGUARD_CAPTCHA_MIN_SCORE: must be between 0 and 1"},
		{"a timeout too short", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile, "OTPGUARD_CAPTCHA_TIMEOUT": "5ms"}, "OTPGUARD_CAPTCHA_TIMEOUT: must be between 100ms and 10s"},
		{"more provider calls than half the slots", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile,
			"OTPGUARD_MAX_IN_FLIGHT": "16", "OTPGUARD_CAPTCHA_MAX_IN_FLIGHT": "9"}, "OTPGUARD_CAPTCHA_MAX_IN_FLIGHT: must be between 1 and half of OTPGUARD_MAX_IN_FLIGHT (8)"},
		{"half the slots", map[string]string{"OTPGUARD_CAPTCHA_VERIFY_URL": turnstile,
			"OTPGUARD_MAX_IN_FLIGHT": "16", "OTPGUARD_CAPTCHA_MAX_IN_FLIGHT": "8"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"OTPGUARD_CAPTCHA_SECRET": "s3cret", "OTPGUARD_CAPTCHA_SITE_KEY": "site-1",
				"OTPGUARD_CAPTCHA_HOSTNAMES": "example.com"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			cfg, err := Load(func(k string) string { return vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			cfg.Policies.OTP.Challenge.Type = guard.ChallengeCaptcha
			err = cfg.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Validate: %v, want valid", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Validate: %v, want an error naming %q", err, tc.err)
			}
		})
	}
}
