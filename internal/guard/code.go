package guard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// issued is a code made for a send: its digits, its life, and its
// verification ("" for a stateless code).
type issued struct {
	text string
	ttl  time.Duration
	id   string
}

// issueCode makes the code to send. A random code, saved as its HMAC with
// a new verification (whose id it returns), when the store takes it;
// otherwise, unless the policy is closed, the stateless code of the
// current step, which needs no store and has no verification (id "").
func (s *OTP) issueCode(ctx context.Context, phone Phone, tier Tier) (issued, error) {
	code, err := s.newCode()
	if err != nil {
		return issued{}, fmt.Errorf("otp: new code: %w", err)
	}
	id, err := newVerificationID(s.random)
	if err != nil {
		return issued{}, err
	}
	if tier == TierSolved { // its verify counts in the solved tier's watch (challenge.go)
		id = s.markSolved(id)
	}
	ttl := s.policy.CodeTTL
	prev, err := s.codes.SaveCode(ctx, NewCode{Phone: phone.E164, MAC: s.mac(phone.E164, code), TTL: ttl,
		VerificationID: id, MaxAttempts: s.policy.MaxVerifyAttempts, Now: s.now(), Retention: VerificationRetention})
	if errors.Is(err, ErrUnindexed) { // saved, but GET /otp/verifications/{id} cannot find it: no id
		s.log.DebugContext(ctx, "code saved without its verification id's index", "phone", MaskPhone(phone.E164), "err", err)
		id, err = "", nil
	}
	if err == nil {
		if prev >= s.policy.MaxVerifyAttempts { // it replaced a locked code: the lock-out is over
			if err := s.blocks.EndBlock(context.WithoutCancel(ctx), phone.E164, problem.CodeTooManyAttempts); err != nil {
				s.log.WarnContext(ctx, "ending a lock-out block failed", "phone", MaskPhone(phone.E164), "err", err)
			}
		}
		return issued{text: code, ttl: ttl, id: id}, nil
	}
	if !s.statelessCodes() || errors.Is(err, problem.ErrOverloaded) { // overload is not an outage: no stateless code
		s.log.Log(ctx, limit.StoreFailureLevel(err), "saving code failed", "phone", MaskPhone(phone.E164), "err", err)
		return issued{}, limit.StoreError(err)
	}
	// Debug: the breaker and the policy log the outage once, not per send.
	s.log.DebugContext(ctx, "saving code failed: sending a stateless code", "phone", MaskPhone(phone.E164), "err", err)
	code, ttl = s.statelessNow(phone.E164, s.now())
	return issued{text: code, ttl: ttl}, nil
}

// checkCodeFormat refuses a guess that is not CodeLength digits.
func (s *OTP) checkCodeFormat(code string) error {
	if len(code) != s.policy.CodeLength {
		return problem.Errorf(problem.CodeInvalidCode, "code must be %d digits", s.policy.CodeLength)
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return problem.Errorf(problem.CodeInvalidCode, "code must be %d digits", s.policy.CodeLength)
		}
	}
	return nil
}

// newCode draws a uniformly random code of CodeLength digits.
func (s *OTP) newCode() (string, error) {
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(s.policy.CodeLength)), nil)
	n, err := rand.Int(s.random, max)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%0*d", s.policy.CodeLength, n), nil
}

// mac binds the code to the number, so a stored HMAC is useless for any
// other number and reveals nothing without the key.
func (s *OTP) mac(phone, code string) []byte {
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte(phone))
	m.Write([]byte{0})
	m.Write([]byte(code))
	return m.Sum(nil)
}
