package app

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net/url"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
)

// CaptchaConfig is the CAPTCHA provider of otp.challenge.type: captcha.
type CaptchaConfig struct {
	VerifyURL string
	Secret    string
	SiteKey   string
}

// checkCaptcha: type captcha needs its provider, at an http(s) URL.
func (c *Config) checkCaptcha() error {
	cc := c.Captcha
	if cc.VerifyURL != "" {
		if u, err := url.Parse(cc.VerifyURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return errors.New("OTPGUARD_CAPTCHA_VERIFY_URL: must be an http(s) URL")
		}
	}
	if c.Policies.OTP.Challenge.Type == guard.ChallengeCaptcha && (cc.VerifyURL == "" || cc.Secret == "" || cc.SiteKey == "") {
		return errors.New("otp.challenge.type captcha needs OTPGUARD_CAPTCHA_VERIFY_URL, OTPGUARD_CAPTCHA_SECRET and OTPGUARD_CAPTCHA_SITE_KEY")
	}
	return nil
}

// newChallenger is the verifier of otp.challenge (nil: off). Its key is
// derived from the HMAC key, which every instance shares.
func newChallenger(cfg *Config, p guard.ChallengePolicy) guard.Challenger {
	m := hmac.New(sha256.New, cfg.HMACKey)
	m.Write([]byte("otpguard challenge key v1"))
	key := m.Sum(nil)
	switch p.Type {
	case guard.ChallengePoW:
		return challenge.NewPoW(key, p.MaxNumber, p.Expires)
	case guard.ChallengeCaptcha:
		if cfg.Captcha.VerifyURL == "" {
			return nil // Validate refuses it; a reload to captcha without a provider keeps refusals
		}
		return challenge.NewCaptcha(challenge.CaptchaOptions{Key: key, VerifyURL: cfg.Captcha.VerifyURL,
			Secret: cfg.Captcha.Secret, SiteKey: cfg.Captcha.SiteKey, Expires: p.Expires})
	}
	return nil
}
