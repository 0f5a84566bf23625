package guard

import (
	"context"
	"errors"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// solvedTier checks the solution a send came with, as far as it can be
// checked without a provider (Challenger.Check): one that holds makes the
// send TierSolved, its provider's word still to come (confirmSolved); one
// that does not leaves it TierNew (the automatic rules then judge it, and
// may challenge it again). A verifier that fails refuses the send: 503
// challenge_unavailable, never an allow.
func (s *challenges) solvedTier(ctx context.Context, phone Phone, ip, solution string) (Tier, *Solution, error) {
	if solution == "" || !s.on {
		return TierNew, nil, nil
	}
	sol, err := s.challenger.Check(ctx, phone.E164, solution, ip, s.now())
	switch {
	case err != nil && !errors.Is(err, ErrBadSolution):
		s.log.WarnContext(ctx, "challenge verifier failed", "err", err)
		return TierNew, nil, challengeUnavailable(err)
	case err != nil:
		s.log.InfoContext(ctx, "challenge solution refused", "phone", MaskPhone(phone.E164), "err", err)
		return TierNew, nil, nil
	}
	return TierSolved, &sol, nil
}

// challengeUnavailable is the refusal of a send whose challenge could not
// be checked.
func challengeUnavailable(err error) error {
	return &problem.Error{Code: problem.CodeChallengeUnavailable, RetryAfter: 5 * time.Second, Err: err,
		Message: "the challenge could not be checked; try again shortly"}
}
