package client

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
)

// CodeChallengeRequired is a send an automatic abuse rule would refuse:
// the *Error's Challenge says what to solve; send again with the solution
// in SendRequest.Challenge (docs/abuse.md, "Challenges").
const (
	CodeChallengeRequired    = "challenge_required"
	CodeChallengeUnavailable = "challenge_unavailable"
)

// Challenge is a 428 challenge_required's challenge, for the app to hand
// to the user's browser (examples/signin). Type "pow": ALTCHA's proof of
// work in its v1 shape (Algorithm, Challenge, Salt, MaxNumber, Signature),
// which ALTCHA's widget solves; send its payload as it is. Type "captcha":
// render the provider's widget with SiteKey and send ID + "." + the
// provider's token (CaptchaSolution).
type Challenge struct {
	Type      string `json:"type"`
	Algorithm string `json:"algorithm,omitempty"`
	Challenge string `json:"challenge,omitempty"`
	Salt      string `json:"salt,omitempty"`
	MaxNumber int64  `json:"maxnumber,omitempty"`
	Signature string `json:"signature,omitempty"`
	SiteKey   string `json:"site_key,omitempty"`
	ID        string `json:"id,omitempty"`
}

// ChallengeOf returns the challenge err asks to solve, if it is a 428
// challenge_required.
func ChallengeOf(err error) (*Challenge, bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeChallengeRequired && e.Challenge != nil {
		return e.Challenge, true
	}
	return nil, false
}

// SolvePoW finds the proof of work's number and returns the solution to
// send in SendRequest.Challenge: base64 of the JSON of algorithm,
// challenge, number, salt and signature.
//
// Deprecated: a challenge is solved in the user's browser, by ALTCHA's
// widget (examples/signin), never by the app server: an app that solves
// it does the bot's work, and the challenge proves nothing. SolvePoW stays
// for tests and load tools, which play the browser.
func (c *Challenge) SolvePoW() (string, error) {
	if c.Type != "pow" || c.Algorithm != "SHA-256" {
		return "", errors.New("otpguard: not a SHA-256 proof of work")
	}
	for n := int64(0); n <= c.MaxNumber; n++ {
		h := sha256.Sum256([]byte(c.Salt + strconv.FormatInt(n, 10)))
		if hex.EncodeToString(h[:]) != c.Challenge {
			continue
		}
		b, err := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n,
			"salt": c.Salt, "signature": c.Signature})
		if err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	return "", errors.New("otpguard: the proof of work has no solution up to maxnumber")
}

// CaptchaSolution is what a captcha challenge's resend carries: the
// challenge's ID and the provider's token.
func (c *Challenge) CaptchaSolution(token string) string { return c.ID + "." + token }
