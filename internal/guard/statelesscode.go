package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// Codes during an outage. A code must be stored to be checked on another
// instance, and the store is what is gone; so when the OTP policy is not
// closed and the code cannot be saved, otpguard sends a stateless code
// instead: derived from the HMAC key, the number and the time step, like
// TOTP, so that every instance (sharing OTPGUARD_HMAC_KEY) can recompute it.
//
//	step   = unix time / (code_ttl / statelessSteps)
//	code   = HMAC-SHA256(key, "otpguard stateless code v1" | phone | step | code_ttl)
//	         first 8 bytes, big-endian, mod 10^code_length
//
// A verify accepts the codes of the statelessSteps steps whose start lies
// within the last code_ttl: a code lives between (1 - 1/statelessSteps) x
// code_ttl and code_ttl after it was sent, never longer. Each guess is
// compared with those statelessSteps candidates, so it is statelessSteps
// times likelier to hit than a guess at a stored code.
//
// Stateless codes are accepted only while the store fails or within one
// code_ttl after this instance last saw it fail (Fallback.LastFailure):
// otherwise any number could be "verified" by guessing without any SMS.
//
// Guesses are counted (before comparing) in the counter Key{otp, phone,
// sguess}, max_verify_attempts per code_ttl, and a code that verified is
// marked used in Key{otp, phone, used:<step>}, both through the Counter: in
// Redis when it answers, else in this instance's memory. So while Redis is
// down the guess limit becomes max_verify_attempts per instance (N x
// max_verify_attempts in all; with open, split as any limit), and a code
// can be used once per instance.
const statelessSteps = 3

// stateless makes and checks the stateless codes of an OTP service.
type stateless struct {
	policy  OTPPolicy
	hmacKey []byte
	counter limit.Counter // the guesses and the used marks
	// lastStoreFailure: see OTPOptions.LastStoreFailure.
	lastStoreFailure func() time.Time
	log              *slog.Logger
	now              func() time.Time
}

// on reports whether this policy sends stateless codes when the
// store cannot save one.
func (s *stateless) on() bool {
	return s.policy.OnStoreError != limit.FallbackClosed && len(s.hmacKey) > 0
}

func (s *stateless) stepLength() time.Duration {
	return max(time.Second, s.policy.CodeTTL/statelessSteps)
}

func (s *stateless) step(t time.Time) int64 { return t.UnixNano() / int64(s.stepLength()) }

// code is the code of phone in step.
func (s *stateless) code(phone string, step int64) string {
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte("otpguard stateless code v1\x00"))
	m.Write([]byte(phone))
	var b [17]byte // a zero separator, the step, the TTL
	binary.BigEndian.PutUint64(b[1:9], uint64(step))
	binary.BigEndian.PutUint64(b[9:], uint64(s.policy.CodeTTL))
	m.Write(b[:])
	sum := m.Sum(nil)
	mod := uint64(1)
	for range s.policy.CodeLength {
		mod *= 10
	}
	return fmt.Sprintf("%0*d", s.policy.CodeLength, binary.BigEndian.Uint64(sum[:8])%mod)
}

// current is the code to send now and how long it stays valid; ok is
// false when the policy sends no stateless codes (on).
func (s *stateless) current(phone string, now time.Time) (code string, ttl time.Duration, ok bool) {
	if !s.on() {
		return "", 0, false
	}
	k := s.step(now)
	start := time.Unix(0, k*int64(s.stepLength()))
	return s.code(phone, k), start.Add(s.policy.CodeTTL).Sub(now), true
}

// match compares code with every live step's code, all of them
// every time, and returns the step that matched.
func (s *stateless) match(phone, code string, now time.Time) (int64, bool) {
	cur := s.step(now)
	var found int64 = -1
	for k := cur - statelessSteps + 1; k <= cur; k++ {
		if subtle.ConstantTimeCompare([]byte(s.code(phone, k)), []byte(code)) == 1 {
			found = k
		}
	}
	return found, found >= 0
}

// recentFailure reports whether stateless codes may be in circulation: the
// store failed within the last code TTL.
func (s *stateless) recentFailure(now time.Time) bool {
	last := s.lastStoreFailure()
	return !last.IsZero() && now.Sub(last) < s.policy.CodeTTL
}

// take is a counter of the stateless scheme: the guesses at a
// number's codes, or the mark that a step's code was used.
func (s *stateless) take(phone, name string, lim int64) limit.Take {
	t := limit.Take{Key: limit.Key{Space: "otp", ID: phone, Name: name}, Algorithm: limit.FixedWindow, Limit: lim,
		Window: s.policy.CodeTTL, Cost: 1, Policy: OTPPolicyName, OnStoreError: s.policy.OnStoreError}
	if t.OnStoreError == limit.FallbackLocal {
		t.LocalLimit = lim
	}
	return t
}

// verify checks code against the number's stateless codes:
// counts the guess, compares, and marks the code used on a match.
func (s *stateless) verify(ctx context.Context, phone Phone, code string) error {
	now := s.now()
	res, err := s.counter.Take(ctx, []limit.Take{s.take(phone.E164, "sguess", int64(s.policy.MaxVerifyAttempts))})
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "counting a guess failed", "phone", MaskPhone(phone.E164), "err", err)
		return limit.StoreError(err)
	}
	if !res[0].Allowed {
		return &problem.Error{Code: problem.CodeTooManyAttempts, Message: "too many wrong guesses; request a new code", RetryAfter: res[0].RetryAfter}
	}
	k, ok := s.match(phone.E164, code, now)
	if !ok {
		left := int(res[0].Remaining)
		return &problem.Error{Code: problem.CodeWrongCode, Message: "the code is wrong", AttemptsLeft: &left}
	}
	return s.use(ctx, phone, k)
}

// use marks step's code used: of two uses (on one instance, or in
// Redis) one wins.
func (s *stateless) use(ctx context.Context, phone Phone, step int64) error {
	res, err := s.counter.Take(ctx, []limit.Take{s.take(phone.E164, "used:"+strconv.FormatInt(step, 10), 1)})
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "marking a code used failed", "phone", MaskPhone(phone.E164), "err", err)
		return limit.StoreError(err)
	}
	if !res[0].Allowed {
		return problem.Errorf(problem.CodeNoActiveCode, "the code was already used")
	}
	return nil
}
