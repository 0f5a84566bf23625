package simulate

// The client side of trust and challenges, in one file: the "account"
// flag of a send, the import of trusted numbers, solving a 428
// challenge_required and taking the fallback channel a held send is
// offered as a client would, so that a scenario drives them through the
// same API an app uses.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// sendBody is POST /otp/send's body.
type sendBody struct {
	Phone    string `json:"phone"`
	ClientIP string `json:"client_ip"`
	// Account: the app says the number belongs to an existing account.
	Account bool `json:"account,omitempty"`
	// Challenge is the solution of the challenge a 428 asked for.
	Challenge string `json:"challenge,omitempty"`
	// Channel is the fallback channel a held send was offered; "" SMS.
	Channel string `json:"channel,omitempty"`
	// Service: the send goes through this Verify service's route instead
	// (tenants.go); "" the default service's /otp/send.
	Service string `json:"-"`
}

// fallback is a held send's offer of another channel (otp.fallback_channel).
type fallback struct {
	Channel string `json:"channel"`
}

// codeChallenge is the problem code of a send that must solve a challenge
// first (428).
const codeChallenge = "challenge_required"

// challenge is a 428's challenge object: what to solve.
type challenge struct {
	Type string `json:"type"` // "pow" or "captcha"
	// Proof of work, in ALTCHA's format: find the number n (at most
	// MaxNumber) with hex(SHA-256(Salt + n)) == Challenge.
	Algorithm string `json:"algorithm,omitempty"`
	Challenge string `json:"challenge,omitempty"`
	Salt      string `json:"salt,omitempty"`
	MaxNumber int    `json:"maxnumber,omitempty"`
	Signature string `json:"signature,omitempty"`
	// CAPTCHA: the provider's site key and the signed ID to send back
	// with the provider's token ("<id>.<token>").
	SiteKey string `json:"site_key,omitempty"`
	ID      string `json:"id,omitempty"`
}

// maxWork bounds a proof of work the simulator computes (a client would
// give up too).
const maxWork = 10_000_000

// solve answers c as a client would: it computes the proof of work, or
// solves the widget, which the fake CAPTCHA provider will accept once, and
// sends back its ID and token. ok is false for a challenge it cannot
// solve.
func (d *deployment) solve(c *challenge) (solution string, ok bool) {
	switch c.Type {
	case "captcha":
		if c.ID == "" {
			return "", false
		}
		return c.ID + "." + d.captcha.token(), true
	case "pow":
		if c.Algorithm != "SHA-256" {
			return "", false
		}
		for n := 0; n <= min(c.MaxNumber, maxWork); n++ {
			sum := sha256.Sum256([]byte(c.Salt + strconv.Itoa(n)))
			if hex.EncodeToString(sum[:]) == c.Challenge {
				b, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge,
					"number": n, "salt": c.Salt, "signature": c.Signature})
				return base64.StdEncoding.EncodeToString(b), true
			}
		}
	}
	return "", false
}

// importBatch is how many numbers one import request carries.
const importBatch = 500

// importTrusted imports numbers as trusted (POST /ops/trusted-numbers,
// ops key). It returns how many were taken and the first refusal.
func (d *deployment) importTrusted(ctx context.Context, numbers []string) (int, error) {
	done := 0
	for len(numbers) > 0 {
		n := min(importBatch, len(numbers))
		ans := d.do(ctx, http.MethodPost, "/ops/trusted-numbers", opsKey, map[string]any{"numbers": numbers[:n]})
		if ans.status/100 != 2 {
			return done, fmt.Errorf("POST /ops/trusted-numbers: %d %s", ans.status, ans.problem.Code)
		}
		done += n
		numbers = numbers[n:]
	}
	return done, nil
}

// fallBack sends body again by the channel a held send was offered, as a
// user who takes it does, and reports whether it went: its code counts
// as the try's, in FallbackSends (not Sent, nor Cost: the scenario's
// prices are an SMS's); its refusal is the try's.
func (r *runner) fallBack(ctx context.Context, body sendBody, channel string, add func(func(c *Counts)), known bool, carrier string) bool {
	body.Channel, body.Challenge = channel, ""
	ans := r.send(ctx, body)
	if ans.status != http.StatusOK {
		add(countRefusal(ans, known, carrier))
		return false
	}
	add(func(c *Counts) { c.FallbackSends++ })
	return true
}

// countRefusal counts a try refused with ans: in the refusals, by its code,
// as a returning try's (known) and in its carrier's row.
func countRefusal(ans answer, known bool, carrier string) func(c *Counts) {
	return func(c *Counts) {
		c.Refused++
		c.RefusedByCode[ans.problem.Code]++
		c.ReturningRefused += b2i(known)
		c.ofCarrier(carrier).Refused++
	}
}
