package app

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
)

// newChallenger is the verifier of otp.challenge (nil: off). Its key is
// derived from the HMAC key, which every instance shares. calls bounds the
// CAPTCHA provider's calls under way, shared by the verifiers of every
// policy a reload builds.
func newChallenger(cfg *config.Config, p guard.ChallengePolicy, calls *challenge.ProviderCalls) guard.Challenger {
	m := hmac.New(sha256.New, cfg.HMACKey)
	m.Write([]byte("otpguard challenge key v1"))
	key := m.Sum(nil)
	switch p.Type {
	case guard.ChallengePoW:
		return challenge.NewPoW(key, p.MaxNumber, p.Expires)
	case guard.ChallengeCaptcha:
		cc := cfg.Captcha
		if cc.VerifyURL == "" || len(cc.Hostnames) == 0 {
			return nil // Validate refuses it; a reload to captcha without a provider keeps refusals
		}
		return challenge.NewCaptcha(challenge.CaptchaOptions{Key: key, VerifyURL: cc.VerifyURL,
			Secret: cc.Secret, SiteKey: cc.SiteKey, Expires: p.Expires,
			Hostnames: cc.Hostnames, Action: cc.Action, MinScore: cc.MinScore,
			Timeout: cc.Timeout, Calls: calls})
	}
	return nil
}
