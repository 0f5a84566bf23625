package guard

import (
	"context"

	"github.com/otpguard/otpguard/internal/limit"
)

// giveBack returns what a send that surely did not leave spent: its budget,
// its count in the country's hour and, with try, the number's own limits
// (its cooldown and per-number count), each in the window it was counted
// in (Take.WindowID), in one refund. The per-address and the automatic
// abuse limits stay spent: they bound how many provider calls one address
// or one range of numbers costs, and a refusal an attacker provokes (a
// flood that meets the provider's rate limit, numbers it refuses) must not
// hand them back. A send whose place the vouched tier refused gives back
// all it held, as a challenged send does (vouchedplace.go).
func (s *spender) giveBack(ctx context.Context, phone Phone, sp spent, try bool) {
	back := budgetTakes(sp.takes)
	if try {
		back = append(back, numberTakes(sp.takes, phone)...)
	}
	if v := sp.vouched; v != nil && v.refused {
		back = sp.takes
	}
	s.refund(ctx, back)
	if !sp.velocityAt.IsZero() {
		s.refundVolume(ctx, sp.velocity, sp.velocityAt)
	}
	if v := sp.vouched; v != nil && v.counted {
		s.refundVolume(ctx, volumeCount{tier: v.vol.Key, carrier: v.vol.Carrier.Key}, v.vol.Now)
	}
}

// numberTakes are the number's own takes among passed: its cooldown and
// its per-number windows (PhoneCounterKeys), the keys of space "otp" that
// the number names.
func numberTakes(passed []limit.Take, phone Phone) []limit.Take {
	var out []limit.Take
	for _, t := range passed {
		if t.Key.Space == "otp" && t.Key.ID == phone.E164 {
			out = append(out, t)
		}
	}
	return out
}

// budgetTakes are the budget takes among passed: what a send that surely
// did not leave gives back.
func budgetTakes(passed []limit.Take) []limit.Take {
	var out []limit.Take
	for _, t := range passed {
		if t.Key.Space == budgetHourKey.Space {
			out = append(out, t)
		}
	}
	return out
}
