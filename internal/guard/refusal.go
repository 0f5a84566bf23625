package guard

import (
	"context"
	"errors"

	"github.com/otpguard/otpguard/internal/problem"
)

// What an automatic refusal becomes (the challenges step's flow): the
// network's risk score has its word first (riskstep.go), then an
// untrusted send gets a challenge (challenge.go).

// refused answers a send of tier an automatic rule (or the solved cap)
// refused, err the refusal and sp what spend carried back with it: the
// network's risk score has its word first (riskstep.go): a high score
// refuses, a low one lets the send through in the vouched tier (its spent
// comes back with no error); without a word, an untrusted send gets the
// challenge (challengeInstead).
func (s *challenges) refused(ctx context.Context, phone Phone, ip string, tier Tier, sp spent, err error) (spent, error) {
	if vsp, verr, decided := s.risk.instead(ctx, phone, ip, tier, sp, err); decided {
		return vsp, verr
	}
	return spent{}, s.challengeInstead(ctx, phone, tier, err)
}

// instead is what the score makes of a send of tier an automatic rule
// refused (err), refused what spend carried back (the cached answer the
// send's script read, whether the store failed in it): a refusal
// (a high score, or a line type the policy does not allow), the send
// spent again in the vouched tier (a low score: its spent, or the
// refusal of a limit that tier keeps), or nothing (decided false: the
// send gets what it would without a score). A send judged before its
// limits (before) is not asked about again, nor one the store failed in.
func (s *risk) instead(ctx context.Context, phone Phone, ip string, tier Tier, refused spent, err error) (sp spent, out error, decided bool) {
	if !s.on() || refused.riskAsked || refused.storeFailed || tier == TierTrusted || !automaticRefusal(err) || s.pumping.safe.has(phone.E164) {
		return spent{}, nil, false
	}
	a, ok, cached := s.answer(ctx, phone, refused.risk, refused.lookup)
	defer cached() // beside the vouched tier's spend, when a low score makes one
	if !ok {
		return spent{}, nil, false
	}
	if rerr := s.refusal(a); rerr != nil {
		return spent{}, rerr, true
	}
	if s.verdict(a) != riskLow {
		return spent{}, nil, false
	}
	vouched := s.vouched(phone, refused.baseline)
	vouched.channel = refused.channel
	sp, err = s.spend.spend(ctx, phone, ip, vouched)
	if err != nil && (errors.Is(err, errVouchedCap) || problem.CodeOf(err) == problem.CodeStoreUnavailable) {
		return spent{}, nil, false // the vouched tier cannot take it: the challenge
	}
	return sp, err, true
}
