package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
)

// CaptchaConfig is the CAPTCHA provider of otp.challenge.type: captcha.
type CaptchaConfig struct {
	VerifyURL string
	Secret    string
	SiteKey   string
	// Hostnames, Action and MinScore are what a provider's answer must
	// name (challenge.CaptchaOptions).
	Hostnames []string
	Action    string
	MinScore  float64
	// Timeout bounds one siteverify call.
	Timeout time.Duration
	// MaxInFlight bounds the siteverify calls under way at once (0: the
	// default, CaptchaCalls).
	MaxInFlight int
}

// checkCaptcha: type captcha needs its provider, at an http(s) URL, and
// the sites its tokens may come from; a score-based provider needs the
// least score it accepts.
func (c *Config) checkCaptcha() error {
	cc := c.Captcha
	var cs complaints
	if cc.VerifyURL != "" {
		if u, err := url.Parse(cc.VerifyURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			cs.add("OTPGUARD_CAPTCHA_VERIFY_URL: must be an http(s) URL")
		} else if scoreBased(u) && cc.MinScore == 0 {
			cs.add("OTPGUARD_CAPTCHA_MIN_SCORE: required with reCAPTCHA (%s): its v3 answers carry a score, and a score nobody checks lets a bot's token through", u.Host)
		} else if invertedScore(u) && cc.MinScore != 0 {
			// Scores are read as reCAPTCHA's (1.0 a person); hCaptcha's
			// run the other way (1.0 a bot), and a minimum read the wrong
			// way round would let bots through and refuse people.
			cs.add("OTPGUARD_CAPTCHA_MIN_SCORE: scores are read as reCAPTCHA's (1.0 a person) and hCaptcha's (%s) run the other way: unset it", u.Host)
		}
	}
	if c.Policies.OTP.Challenge.Type == guard.ChallengeCaptcha {
		if cc.VerifyURL == "" || cc.Secret == "" || cc.SiteKey == "" {
			cs.add("otp.challenge.type captcha needs OTPGUARD_CAPTCHA_VERIFY_URL, OTPGUARD_CAPTCHA_SECRET and OTPGUARD_CAPTCHA_SITE_KEY")
		}
		if len(cc.Hostnames) == 0 {
			cs.add("otp.challenge.type captcha needs OTPGUARD_CAPTCHA_HOSTNAMES: the sites a token may be solved on (a token solved elsewhere is refused)")
		}
	}
	return cs.err()
}

// invertedScore reports whether the siteverify at u is hCaptcha's, whose
// Enterprise answers carry a score where 1.0 means a bot.
func invertedScore(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	return h == "hcaptcha.com" || strings.HasSuffix(h, ".hcaptcha.com")
}

// scoreBased reports whether the siteverify at u is reCAPTCHA's (Google's
// host or recaptcha.net), whose v3 answers carry a score.
func scoreBased(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	google := h == "google.com" || strings.HasSuffix(h, ".google.com")
	return h == "recaptcha.net" || strings.HasSuffix(h, ".recaptcha.net") ||
		google && strings.HasPrefix(u.Path, "/recaptcha/")
}

func checkCaptchaMinScore(c *Config) error {
	if s := c.Captcha.MinScore; s < 0 || s > 1 {
		return fmt.Errorf("must be between 0 and 1 (0: unset), got %g", s)
	}
	return nil
}

func checkCaptchaTimeout(c *Config) error {
	if d := c.Captcha.Timeout; d < 100*time.Millisecond || d > 10*time.Second {
		return fmt.Errorf("must be between 100ms and 10s, got %s", d)
	}
	return nil
}

// checkCaptchaMaxInFlight: at most half of the instance's in-flight slots
// may wait on the provider.
func checkCaptchaMaxInFlight(c *Config) error {
	if n, most := c.Captcha.MaxInFlight, max(1, c.MaxInFlight/2); n != 0 && (n < 1 || n > most) {
		return fmt.Errorf("must be between 1 and half of OTPGUARD_MAX_IN_FLIGHT (%d), got %d", most, n)
	}
	return nil
}

// CaptchaCalls is how many siteverify calls one instance has under way at
// once: OTPGUARD_CAPTCHA_MAX_IN_FLIGHT, or 16 and at most a quarter of
// OTPGUARD_MAX_IN_FLIGHT.
func (c *Config) CaptchaCalls() int {
	if c.Captcha.MaxInFlight > 0 {
		return c.Captcha.MaxInFlight
	}
	return min(challenge.DefaultProviderCalls, max(1, c.MaxInFlight/4))
}
