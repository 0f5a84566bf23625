package guard

import (
	"context"

	"github.com/otpguard/otpguard/internal/limit"
)

// VerifyRequest checks Code against the code last sent to Phone by
// Service ("" the default service, service.go); with VerificationID, only
// if that code is still that verification's.
type VerifyRequest struct {
	Phone          string
	Code           string
	Service        string
	VerificationID string
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
	phone = phone.of(req.Service) // its credit counts in the service's rooms (room.go)
	if err == nil {
		err = s.codes.checkCodeFormat(req.Service, req.Code)
	}
	if err != nil {
		s.audit.record(ctx, ActionOTPVerify, "", phone, "", req.Service, err)
		return VerifyResult{}, err
	}
	ctx = limit.WithDecision(ctx)
	vid, err := s.codes.verify(ctx, phone, req.Code, GuessOf{Service: req.Service, VerificationID: req.VerificationID})
	s.audit.record(ctx, ActionOTPVerify, OutcomeValid, phone, "", req.Service, err)
	if err != nil {
		return VerifyResult{Phone: phone}, err // the number, for the caller's log
	}
	// The verify is credited to the tier its send counted in, which the
	// verification carries (tiermark.go): a solved send's code counts in
	// the solved tier's watch, and credits no baseline (challenge.go); a
	// trusted send's (an account's number too, marked or not) and the
	// verify of a number trusted before it count in neither (trust.go,
	// creditable), so the mark goes first. A stateless code has no
	// verification: its verify is credited as a new send's unless the
	// number was marked.
	// A fallback send's verify credits no tier's watch or baseline
	// (fallback.go): the send counted in none.
	sent := s.codes.marks.tier(vid)
	solved, fellBack := sent == TierSolved, sent == TierNew && s.codes.marks.fellBack(vid)
	if trusted := s.trust.rememberVerified(ctx, phone, sent); !trusted && !fellBack {
		s.watch.verify(ctx, phone, solved)
		if !solved {
			s.velocity.creditVerify(ctx, phone)
		} else {
			s.solved.credit(ctx, phone)
		}
	}
	return VerifyResult{Phone: phone, VerificationID: vid}, nil
}
