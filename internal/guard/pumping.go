package guard

import (
	"log/slog"
	"time"
)

// SMS pumping defences (README.md, "Abuse defences"). Pumping is many different numbers
// in a premium or otherwise lucrative range, requested from rotating
// addresses: per-number and per-IP limits never fire. These rules look at
// what the numbers have in common instead: their country, their type,
// their prefix, and how few of the codes sent to them are ever verified.
// And the spend budget bounds what a miss costs. Their policy (PrefixWindow,
// Budget, ConversionPolicy) is in policy.go with the rest.

// pumping is the automatic abuse rules of a send (prefix, country,
// destination, the spend budget) under the ops desk's overrides, and the
// tiers' counts they hand to spend.
type pumping struct {
	policy    OTPPolicy
	overrides Overrides // the ops desk's emergency overrides (override.go); nil: none
	safe      safeList
	velocity  *velocity
	room      *coldRoom
	log       *slog.Logger
	now       func() time.Time
}

// abuseTakes is what the automatic abuse rules add to one send: their
// limits, spent with the number's own, and the country velocity count
// (nil when the rule does not apply).
type abuseTakes struct {
	limits   []limitedTake
	velocity *VolumeTake
	// refusal (nil: none) refuses the send before its limits: an opt-in
	// country's high risk score (riskstep.go). riskAsked: the send's score
	// was judged before its limits, and is not asked about again.
	refusal   error
	riskAsked bool
	// lookup (nil: none) is the place in the lookup budget the send takes
	// beside its first round trip, for its refusal's score (riskstep.go).
	lookup *lookupHold
	// channel is the send's (channel.go): its own per-number window and
	// its price in the budget (spend.go).
	channel string
	// policy is the send's service's (servicepolicy.go): its number's
	// limits and its own budget (spend.go); nil: the deployment's.
	policy *servicePolicy
}

// abuseRules are the automatic abuse rules of a send to phone: the prefix
// and country limits and the country velocity rule, which a safe-listed
// number and a trusted send skip, and the spend budget, which they do not.
// A trusted send counts in the trusted tier instead; a send of unknown
// trust carries its mark, for the store to decide with the count. The velocity
// count goes out with the limits (one round trip) when the counter can
// take it; it counts only sends every other limit let through, so its
// count is given back when another limit denies (spend). A solved send
// (TierSolved, with its solution sol) skips the automatic rules and meets
// the solved cap instead (solved.go), in the velocity count's place.
func (s *pumping) abuseRules(phone Phone, tier Tier, sol *Solution) abuseTakes {
	safe := s.safe.has(phone.E164)
	if tier == TierSolved && sol != nil {
		return abuseTakes{limits: s.abuseLimits(phone, false, true), velocity: s.velocity.volumeFor(phone, tier, sol, safe)}
	}
	vol := s.velocity.volumeFor(phone, tier, nil, safe)
	// The operator's overrides stay for a trusted send, the file's rules
	// go; an untrusted send to a cold country takes the cold room too,
	// last (coldroom.go).
	limits := s.abuseLimits(phone, safe, tier == TierTrusted)
	return abuseTakes{limits: append(limits, s.room.takes(phone, tier, vol)...), velocity: vol}
}

// AbuseHooks tell metrics what the abuse defences did. Nil fields are
// skipped.
type AbuseHooks struct {
	// BudgetRefused is told of every send refused by the budget, with its
	// window ("hour" or "day").
	BudgetRefused func(window string)
	// ConversionAlert is told of every alert of the conversion watch:
	// scope "prefix" or "country", action "reported" or "blocked".
	ConversionAlert func(scope, action string)
	// VelocityRefused is told of every send the country velocity rule
	// refuses, with the country; VelocityAlert once per country and hour
	// across instances.
	VelocityRefused func(country string)
	VelocityAlert   func(country string)
	// TrustMarkHeld is told of every trust mark written held (pace.go),
	// with the country and, when its carrier's counts judged its hour, the
	// carrier's name ("" when the country's did).
	TrustMarkHeld func(country, carrier string)
	// ColdRoomRefused is told of every send the cold room refuses
	// (coldroom.go), with the country.
	ColdRoomRefused func(country string)
}
