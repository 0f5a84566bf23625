package guard

import (
	"context"
	"errors"
)

// Confirmer is a Challenger whose solutions also need a provider's word
// (a CAPTCHA's siteverify). The send asks it last, once every limit that
// can refuse without it let the send through and the solution's single
// use is taken in the store: a limit's refusal costs no provider call, and
// a solution reaches the provider at most once, however often it is sent.
type Confirmer interface {
	// Confirm answers ErrBadSolution for a solution the provider refuses;
	// any other error is the provider's failure (down, slow, busy), which
	// refuses the send with 503.
	Confirm(ctx context.Context, solution, clientIP string) error
}

// confirmSolved asks the provider about a solved send's solution, when
// the challenger has one (Confirmer): after spend took every limit and the
// solution's single use (vol.Solved), before a code is made. A solution
// the provider refuses gets a new challenge, and the send keeps the
// number's and the address's limits spent (a refused token is a try, so a
// stream of them meets those limits as sends do) but gives back its budget
// and its solved count (giveBack); a provider that fails gives back all
// the send spent (503 challenge_unavailable: nothing was sent, and the
// user did nothing wrong). Either way the solution stays used.
func (s *challenges) confirmSolved(ctx context.Context, phone Phone, ip, solution string, vol *VolumeTake, sp spent) error {
	cf, ok := s.challenger.(Confirmer)
	if !ok || vol == nil || vol.Solved == nil {
		return nil
	}
	err := cf.Confirm(ctx, solution, ip)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadSolution):
		s.log.InfoContext(ctx, "challenge solution refused", "phone", MaskPhone(phone.E164), "err", err)
		s.spend.giveBack(ctx, phone, sp, false)
		return s.newChallenge(ctx, phone, "the challenge's solution does not hold; solve the new challenge", err)
	}
	s.log.WarnContext(ctx, "challenge verifier failed", "err", err)
	s.spend.refund(ctx, sp.takes)
	if !sp.velocityAt.IsZero() {
		s.spend.refundVolume(ctx, sp.velocity, sp.velocityAt)
	}
	return challengeUnavailable(err)
}
