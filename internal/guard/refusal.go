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
// challenge (challengeInstead), which is also the answer should the
// vouched tier refuse the place taken beside the code's save.
func (s *challenges) refused(ctx context.Context, phone Phone, ip string, tier Tier, sp spent, err error) (spent, error) {
	vsp, verr, decided := s.risk.instead(ctx, phone, ip, tier, sp, err)
	if !decided {
		return spent{}, s.challengeInstead(ctx, phone, tier, err)
	}
	if vsp.vouched != nil {
		vsp.vouched.without = func(ctx context.Context) error { return s.challengeInstead(ctx, phone, tier, err) }
	}
	return vsp, verr
}

// instead is what the score makes of a send of tier an automatic rule
// refused (err), refused what spend carried back (the cached answer the
// send's script read, whether the store failed in it, the counts it
// holds): a refusal (a high score, or a line type the policy does not
// allow), the send let through in the vouched tier (a low score), or
// nothing (decided false: the send gets what it would without a score).
// A send judged before its limits (before) is not asked about again, nor
// one the store failed in. Every answer but a low score gives the held
// counts back, beside the answer's cache write.
//
// A low score keeps the held counts, which are the vouched tier's own
// limits, and the tier's place per country and hour is taken beside the
// code's save (vouchedplace.go): the send waits on no round trip for the
// tier. A refusal that held nothing (its score was not expected to be
// asked) spends the send again in the tier, all its limits anew.
func (s *risk) instead(ctx context.Context, phone Phone, ip string, tier Tier, refused spent, err error) (sp spent, out error, decided bool) {
	if !s.on() || refused.riskAsked || refused.storeFailed || tier == TierTrusted || !automaticRefusal(err) || s.pumping.safe.has(phone.E164) {
		s.spend.refund(ctx, refused.held)
		return spent{}, nil, false
	}
	// A new answer's cache write goes on beside what follows: the held
	// counts' give-back, or the vouched tier's place (a lookup the hold
	// started is waited for as the send leaves, lookupHold.wait).
	a, ok, cached := s.answer(ctx, phone, refused.risk, refused.lookup)
	defer cached()
	var rerr error
	if ok {
		rerr = s.refusal(a)
	}
	if !ok || rerr != nil || s.verdict(a) != riskLow {
		s.spend.refund(ctx, refused.held)
		return spent{}, rerr, rerr != nil
	}
	vouched := s.vouched(phone, refused.baseline)
	if refused.holds {
		return spent{takes: refused.held, channel: refused.channel, vouched: &vouchedPlace{counter: s.counter,
			velocity: s.pumping.velocity, phone: phone, vol: *vouched.velocity, uncut: refused.uncut,
			log: s.log}}, nil, true
	}
	vouched.channel, vouched.policy = refused.channel, refused.policy
	sp, err = s.spend.spend(ctx, phone, ip, vouched)
	if errors.Is(err, errVouchedCap) && refused.uncut != nil {
		// A solved send the cap's cut refused: the cap without its cuts.
		vouched.velocity = refused.uncut
		sp, err = s.spend.spend(ctx, phone, ip, vouched)
		if problem.CodeOf(err) == problem.CodeUnusualVolume {
			return spent{}, nil, false
		}
	}
	if err != nil && (errors.Is(err, errVouchedCap) || problem.CodeOf(err) == problem.CodeStoreUnavailable) {
		return spent{}, nil, false // the vouched tier cannot take it: the challenge
	}
	return sp, err, true
}
