package guard

import (
	"context"
	"crypto/hmac"
	"errors"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// VerifyRequest checks Code against the code last sent to Phone.
type VerifyRequest struct {
	Phone string
	Code  string
}

// Verify counts the guess, then compares it in constant time, and consumes
// the code on a match: of two concurrent correct guesses exactly one wins.
// After MaxVerifyAttempts wrong guesses the code is dead (even the right
// code is refused) until a new one is sent. On a refusal the number is
// returned when it parsed.
func (s *OTP) Verify(ctx context.Context, req VerifyRequest) (Phone, error) {
	res, err := s.VerifyCode(ctx, req)
	return res.Phone, err
}

// VerifyResult is a right guess: the number, and the verification it
// approved (empty for a stateless code, which has none).
type VerifyResult struct {
	Phone          Phone
	VerificationID string
}

// VerifyCode is Verify, answering the verification approved too.
func (s *OTP) VerifyCode(ctx context.Context, req VerifyRequest) (VerifyResult, error) {
	phone, err := ParsePhone(req.Phone, s.policy.DefaultRegion)
	if err == nil {
		err = s.checkCodeFormat(req.Code)
	}
	if err != nil {
		s.record(ctx, ActionOTPVerify, "", phone, "", err)
		return VerifyResult{}, err
	}
	ctx = limit.WithDecision(ctx)
	vid, err := s.verify(ctx, phone, req.Code)
	s.record(ctx, ActionOTPVerify, OutcomeValid, phone, "", err)
	if err != nil {
		return VerifyResult{Phone: phone}, err // the number, for the caller's log
	}
	// A solved send's code counts in the solved tier's watch, and credits
	// no baseline (challenge.go); the verify of a number trusted before it
	// counts in neither (trust.go, creditable), so the mark goes first.
	solved := s.solvedVerification(vid)
	if trusted := s.rememberVerified(ctx, phone); !trusted {
		s.watchVerify(ctx, phone, solved)
		if !solved {
			s.creditVerify(ctx, phone)
		} else {
			s.creditSolved(ctx, phone)
		}
	}
	return VerifyResult{Phone: phone, VerificationID: vid}, nil
}

// verify checks code and returns the verification it approved ("" for a
// stateless code).
func (s *OTP) verify(ctx context.Context, phone Phone, code string) (string, error) {
	g, err := s.codes.GuessCode(ctx, phone.E164, s.now())
	switch {
	case errors.Is(err, ErrNotFound) && s.statelessCodes() && s.recentStoreFailure(s.now()):
		// Redis answers again, but a stateless code sent while it did
		// not may still be alive.
		return "", s.verifyStateless(ctx, phone, code)
	case errors.Is(err, ErrNotFound):
		return "", problem.Errorf(problem.CodeNoActiveCode, "no code is waiting for this number (never sent, expired or already used)")
	case err != nil && s.statelessCodes() && !errors.Is(err, problem.ErrOverloaded):
		s.log.DebugContext(ctx, "reading code failed: checking stateless codes", "phone", MaskPhone(phone.E164), "err", err)
		return "", s.verifyStateless(ctx, phone, code)
	case err != nil:
		s.log.Log(ctx, limit.StoreFailureLevel(err), "reading code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", limit.StoreError(err)
	}
	if g.Attempts > s.policy.MaxVerifyAttempts {
		return "", s.tooManyAttempts(ctx, phone.E164)
	}
	if !hmac.Equal(g.MAC, s.mac(phone.E164, code)) {
		if s.statelessCodes() && s.recentStoreFailure(s.now()) {
			// The stored code may be one whose save timed out but ran,
			// while the SMS carried a stateless code. The guess is counted.
			if k, ok := s.matchStateless(phone.E164, code, s.now()); ok {
				return "", s.useStateless(ctx, phone, k)
			}
		}
		left := s.policy.MaxVerifyAttempts - g.Attempts
		if left == 0 { // this guess locked the code: the number is blocked until it expires
			s.lockCode(ctx, phone, g.VerificationID)
			s.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: problem.CodeTooManyAttempts,
				Count: int64(g.Attempts), Until: s.now().Add(g.TTL)})
		}
		return "", &problem.Error{Code: problem.CodeWrongCode, Message: "the code is wrong", AttemptsLeft: &left}
	}
	consumed, err := s.codes.ConsumeCode(ctx, phone.E164, g.MAC, s.now())
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "consuming code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", limit.StoreError(err)
	}
	switch consumed {
	case ConsumedOK:
		return g.VerificationID, nil
	case ConsumedLocked: // a concurrent wrong guess used the last attempt first
		return "", &problem.Error{Code: problem.CodeTooManyAttempts,
			Message: "too many wrong guesses; request a new code", RetryAfter: g.TTL}
	}
	return "", problem.Errorf(problem.CodeNoActiveCode, "the code was already used")
}

// lockCode marks the verification of a code that a wrong guess just
// locked max_attempts_reached. A lost mark is mended by the next guess,
// which the store refuses and marks (GuessCode).
func (s *OTP) lockCode(ctx context.Context, phone Phone, id string) {
	if id == "" {
		return
	}
	if err := s.codes.LockCode(context.WithoutCancel(ctx), phone.E164, id, s.now()); err != nil {
		s.log.WarnContext(ctx, "marking a locked verification failed", "phone", MaskPhone(phone.E164), "err", err)
	}
}
