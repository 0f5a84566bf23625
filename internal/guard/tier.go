package guard

import "context"

// Tier is how far a send's number is trusted; it decides which automatic
// rules apply (pumping.abuseRules).
type Tier int

// The tiers of a send.
const (
	TierNew     Tier = iota // untrusted: every automatic rule applies
	TierSolved              // solved a challenge: a tier of its own, not trust
	TierTrusted             // verified before, imported, or an account's number
)

// String names the tier as the desk and the logs show it.
func (t Tier) String() string {
	switch t {
	case TierSolved:
		return "solved"
	case TierTrusted:
		return "trusted"
	}
	return "new"
}

// step is the send's trust decision, before the abuse rules: the
// app's word (account) trusts at once; otherwise the number's mark is
// read in the store, in the velocity script when the send takes one
// (abuseRules, then spend), or here with one round trip of its own when
// no script goes out (the velocity rule off or no volume store).
func (s *trust) step(ctx context.Context, phone Phone, account bool) Tier {
	if account {
		return TierTrusted
	}
	if s.safe.has(phone.E164) || s.velocity.volumes != nil {
		return TierNew // with volumes, the script reads the mark
	}
	if s.trustedNow(ctx, phone, false) { // a store failure: judged new
		return TierTrusted
	}
	return TierNew
}
