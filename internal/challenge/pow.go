// Package challenge owns the verifiers of otpguard's challenges
// (guard/challenge.go): a built-in proof of work in ALTCHA's open format,
// and a CAPTCHA provider's server-side siteverify check. Both bind a
// challenge to the number it was issued for (an HMAC of the number in the
// signed data) and give it an expiry; single use is the store's, in the
// send's own round trip (guard.SolvedUse).
package challenge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// PoW is the proof-of-work challenge, in ALTCHA's format: the client finds
// n in [0, MaxNumber] with hex(SHA-256(salt + decimal(n))) == challenge.
// The salt carries the expiry and the number's binding
// ("<random>?expires=<unix>&phone=<HMAC prefix>"), the signature is
// hex(HMAC-SHA-256(key, challenge)), so nothing is kept until a solution
// comes back.
type PoW struct {
	key       []byte
	maxNumber int64
	expires   time.Duration
}

// NewPoW returns the proof of work keyed by key (derived from otpguard's
// HMAC key: every instance must hold the same one).
func NewPoW(key []byte, maxNumber int64, expires time.Duration) *PoW {
	return &PoW{key: key, maxNumber: maxNumber, expires: expires}
}

var _ guard.Challenger = (*PoW)(nil)

// Issue makes a challenge for e164 that expires after the policy's time.
func (p *PoW) Issue(e164 string, now time.Time) (guard.Challenge, error) {
	var rb [12]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return guard.Challenge{}, fmt.Errorf("challenge: salt: %w", err)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(p.maxNumber+1))
	if err != nil {
		return guard.Challenge{}, fmt.Errorf("challenge: number: %w", err)
	}
	salt := fmt.Sprintf("%s?expires=%d&phone=%s", hex.EncodeToString(rb[:]), now.Add(p.expires).Unix(), phoneMAC(p.key, e164))
	ch := Hash(salt, n.Int64())
	return guard.Challenge{Type: guard.ChallengePoW, Algorithm: "SHA-256", Challenge: ch, Salt: salt,
		MaxNumber: p.maxNumber, Signature: sign(p.key, ch)}, nil
}

// Payload is a proof-of-work solution as the client sends it, base64 of
// its JSON.
type Payload struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	Number    int64  `json:"number"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// Check verifies a solution: the hash, the signature (constant time), the
// expiry and the number's binding. Single use is the caller's.
func (p *PoW) Check(_ context.Context, e164, solution, _ string, now time.Time) (guard.Solution, error) {
	raw, err := base64.StdEncoding.DecodeString(solution)
	if err != nil {
		if raw, err = base64.RawURLEncoding.DecodeString(solution); err != nil {
			return guard.Solution{}, bad("not base64")
		}
	}
	var pl Payload
	if err := json.Unmarshal(raw, &pl); err != nil {
		return guard.Solution{}, bad("not JSON")
	}
	if pl.Algorithm != "SHA-256" || pl.Number < 0 || pl.Number > p.maxNumber {
		return guard.Solution{}, bad("algorithm or number out of range")
	}
	if !hmac.Equal([]byte(Hash(pl.Salt, pl.Number)), []byte(strings.ToLower(pl.Challenge))) {
		return guard.Solution{}, bad("wrong number")
	}
	if !hmac.Equal([]byte(sign(p.key, pl.Challenge)), []byte(strings.ToLower(pl.Signature))) {
		return guard.Solution{}, bad("bad signature")
	}
	exp, err := bound(p.key, pl.Salt, e164, now)
	if err != nil {
		return guard.Solution{}, err
	}
	return guard.Solution{ID: strings.ToLower(pl.Challenge)[:32], Expires: exp}, nil
}

// bound checks the salt's parameters: not expired at now, issued for e164.
func bound(key []byte, salt, e164 string, now time.Time) (time.Time, error) {
	_, q, ok := strings.Cut(salt, "?")
	if !ok {
		return time.Time{}, bad("salt without parameters")
	}
	params, err := url.ParseQuery(q)
	if err != nil {
		return time.Time{}, bad("salt parameters")
	}
	sec, err := strconv.ParseInt(params.Get("expires"), 10, 64)
	if err != nil {
		return time.Time{}, bad("no expiry")
	}
	exp := time.Unix(sec, 0)
	if !now.Before(exp) {
		return time.Time{}, bad("expired")
	}
	if !hmac.Equal([]byte(params.Get("phone")), []byte(phoneMAC(key, e164))) {
		return time.Time{}, bad("issued for another number")
	}
	return exp, nil
}

// Hash is hex(SHA-256(salt + decimal(n))), the challenge of salt and n.
func Hash(salt string, n int64) string {
	h := sha256.Sum256([]byte(salt + strconv.FormatInt(n, 10)))
	return hex.EncodeToString(h[:])
}

// Solve finds the solution of c by trying every number (tests, the
// simulator, a Go client), or "" when none up to MaxNumber fits.
func Solve(c guard.Challenge) string {
	for n := int64(0); n <= c.MaxNumber; n++ {
		if Hash(c.Salt, n) == c.Challenge {
			b, _ := json.Marshal(Payload{Algorithm: c.Algorithm, Challenge: c.Challenge, Number: n, Salt: c.Salt, Signature: c.Signature})
			return base64.StdEncoding.EncodeToString(b)
		}
	}
	return ""
}

func sign(key []byte, challenge string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(challenge))
	return hex.EncodeToString(m.Sum(nil))
}

// phoneMAC binds a challenge to a number: 16 hex digits of an HMAC of it,
// never the number itself.
func phoneMAC(key []byte, e164 string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("phone\x00" + e164))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

func bad(why string) error { return fmt.Errorf("%w: %s", guard.ErrBadSolution, why) }
