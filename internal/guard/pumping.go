package guard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nyaruka/phonenumbers"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// SMS pumping defences (README.md, "Abuse defences"). Pumping is many different numbers
// in a premium or otherwise lucrative range, requested from rotating
// addresses: per-number and per-IP limits never fire. These rules look at
// what the numbers have in common instead: their country, their type,
// their prefix, and how few of the codes sent to them are ever verified.
// And the spend budget bounds what a miss costs. Their policy (PrefixWindow,
// Budget, ConversionPolicy) is in policy.go with the rest.

// numberTypes are the names of otp.allowed_number_types.
var numberTypes = map[string]phonenumbers.PhoneNumberType{
	"fixed_line":           phonenumbers.FIXED_LINE,
	"mobile":               phonenumbers.MOBILE,
	"fixed_line_or_mobile": phonenumbers.FIXED_LINE_OR_MOBILE,
	"toll_free":            phonenumbers.TOLL_FREE,
	"premium_rate":         phonenumbers.PREMIUM_RATE,
	"shared_cost":          phonenumbers.SHARED_COST,
	"voip":                 phonenumbers.VOIP,
	"personal_number":      phonenumbers.PERSONAL_NUMBER,
	"pager":                phonenumbers.PAGER,
	"uan":                  phonenumbers.UAN,
	"voicemail":            phonenumbers.VOICEMAIL,
	"unknown":              phonenumbers.UNKNOWN,
}

// NumberType is libphonenumber's type of an E.164 number, by its name in
// otp.allowed_number_types ("mobile", "premium_rate", ...).
func NumberType(e164 string) string {
	p, err := ParsePhone(e164, "")
	if err != nil {
		return "unknown"
	}
	return p.Type()
}

// Type is the number's type, as NumberType names it, from the parse
// ParsePhone already did.
func (p Phone) Type() string {
	if p.typ != "" { // ParsePhone found it
		return p.typ
	}
	if p.num == nil {
		return NumberType(p.E164)
	}
	return typeName(phonenumbers.GetNumberType(p.num))
}

// Prefix is the number minus its last digitsDropped digits (never less
// than "+" and two digits): the subject of the per-prefix limit and of
// the conversion watch.
func Prefix(e164 string, digitsDropped int) string {
	return e164[:max(min(3, len(e164)), len(e164)-digitsDropped)]
}

// prefixLimits are per_prefix and the coarser prefix_depths, finest first.
// A depth's key names only the prefix, so two depths that drop the same
// number of digits would share a counter: validation refuses that.
func (s *OTP) prefixLimits() []PrefixWindow {
	return append([]PrefixWindow{s.policy.PerPrefix}, s.policy.PrefixDepths...)
}

// safe reports whether the number is on the safe list: it skips the
// velocity and conversion rules, never the spend budget.
func (s *OTP) safe(e164 string) bool {
	for _, p := range s.policy.SafeList {
		if strings.HasPrefix(e164, p) {
			return true
		}
	}
	return false
}

// checkDestination refuses high-risk destinations the policy does not
// allow (highrisk.go), and numbers outside the allowed countries and
// number types.
func (s *OTP) checkDestination(phone Phone) error {
	if now := s.now(); s.abuse.overrides != nil {
		if err := s.enforced(now).over.checkPaused(phone.Region, now); err != nil {
			return err
		}
	}
	highRisk, err := s.checkHighRisk(phone)
	if err != nil {
		return err
	}
	if c := s.policy.AllowedCountries; len(c) > 0 && !highRisk && !slices.Contains(c, phone.Region) {
		return problem.Errorf(problem.CodeCountryNotAllowed, "codes are not sent to numbers of this country")
	}
	if allowed := s.policy.AllowedNumberTypes; len(allowed) > 0 {
		if t := phone.Type(); !slices.Contains(allowed, t) {
			return problem.Errorf(problem.CodeNumberTypeNotAllowed, "codes are not sent to this type of number (%s)", t)
		}
	}
	return nil
}

// Budget keys: one hash tag for both, so they share a slot on Cluster.
var (
	budgetHourKey = limit.Key{Space: "otp:budget", ID: "global", Name: "hour"}
	budgetDayKey  = limit.Key{Space: "otp:budget", ID: "global", Name: "day"}
)

// abuseTakes is what the automatic abuse rules add to one send: their
// limits, spent with the number's own, and the country velocity count
// (nil when the rule does not apply).
type abuseTakes struct {
	limits   []limitedTake
	velocity *VolumeTake
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
// the solved cap instead (challenge.go), in the velocity count's place.
func (s *OTP) abuseRules(phone Phone, tier Tier, sol *Solution) abuseTakes {
	safe := s.safe(phone.E164)
	if tier == TierSolved && sol != nil {
		return abuseTakes{limits: s.abuseLimits(phone, false, true), velocity: s.solvedTake(phone, sol)}
	}
	var vol *VolumeTake
	if s.velocityOn(safe) && tier != TierTrusted {
		v := s.volumeTake(phone)
		vol = &v
	}
	vol = s.trustTake(phone, tier, vol)
	// The operator's overrides stay for a trusted send, the file's rules go.
	return abuseTakes{limits: s.abuseLimits(phone, safe, tier == TierTrusted), velocity: vol}
}

// abuseLimits are the limits of one send after the number's own:
// per prefix and per country (not for safe-listed numbers; with
// operatorOnly, for a solved or trusted send, only those an operator's
// override set), then the spend budget. The file's own prefix and country
// limits are marked Automatic (the store skips them once it finds the
// number trusted). When the store cannot answer they fall back like the
// per-IP limit: split (limit / N) with local or open, refused with closed.
func (s *OTP) abuseLimits(phone Phone, safe, operatorOnly bool) []limitedTake {
	mode := s.policy.OnStoreError
	if mode == limit.FallbackLocal { // local_limit is per number: shared limits get their share
		mode = limit.FallbackOpen
	}
	window := func(k limit.Key, lim int64, w time.Duration) limit.Take {
		return limit.Take{Key: k, Algorithm: limit.FixedWindow, Limit: lim, Window: w, Cost: 1,
			Policy: OTPPolicyName, OnStoreError: mode}
	}
	auto := func(t limit.Take, automatic bool) limit.Take { t.Automatic = automatic; return t }
	// The ops desk's overrides (override.go) lower these limits on the
	// same counters, or add one where the file has none (enforced.go).
	e := s.enforced(s.now())
	depths := s.prefixLimits()
	ls := make([]limitedTake, 0, len(depths)+2)
	seen := make([]string, 0, len(depths)) // the prefixes counted: a few
	for _, pp := range depths {
		prefix := Prefix(phone.E164, pp.DigitsDropped)
		l := e.Prefix(prefix, pp)
		if safe || l.Limit <= 0 || slices.Contains(seen, prefix) || (operatorOnly && !l.Override) { // a short number: two depths, one prefix
			continue
		}
		seen = append(seen, prefix)
		ls = append(ls, limitedTake{
			take:   auto(window(limit.Key{Space: "otp:prefix", ID: prefix, Name: "sends"}, l.Limit, l.Window), !l.Override),
			denial: problem.CodePrefixRateLimited, what: "too many codes were sent to numbers like this one; try again later",
			operator: l.Override,
		})
	}
	for _, prefix := range sortedKeys(e.over.prefix) { // the prefix overrides the file's depths do not count
		if safe || slices.Contains(seen, prefix) || !strings.HasPrefix(phone.E164, prefix) {
			continue
		}
		w := s.policy.PerPrefix.Window
		if w <= 0 {
			w = DefaultOverrideWindow
		}
		ls = append(ls, limitedTake{
			take:   window(limit.Key{Space: "otp:prefix", ID: prefix, Name: "sends"}, e.over.prefix[prefix], w),
			denial: problem.CodePrefixRateLimited, what: "too many codes were sent to numbers like this one; try again later",
			operator: true,
		})
	}
	if !safe && (len(s.policy.PerCountry) > 0 || e.over.country != nil) {
		region := phone.Region
		if region == "" {
			region = "001" // non-geographic numbers (+800, +882...)
		}
		if l, _ := e.Country(region); l.Limit > 0 && (!operatorOnly || l.Override) {
			ls = append(ls, limitedTake{
				take:   auto(window(limit.Key{Space: "otp:country", ID: region, Name: "sends"}, l.Limit, l.Window), !l.Override),
				denial: problem.CodeCountryRateLimited, what: "too many codes were sent to this country; try again later",
				operator: l.Override,
			})
		}
	}
	// The budget refunds its own denied hit: a spent budget then stays at
	// exactly its limit, so a later refund (a send the provider refused)
	// frees a message at once.
	if b := e.Budget(budgetHourKey.Name); b.Limit > 0 {
		ls = append(ls, limitedTake{take: window(budgetHourKey, b.Limit, b.Window), refundDenied: true,
			denial: problem.CodeBudgetExhausted, what: "the SMS budget for this hour is spent; try again later"})
	}
	if b := e.Budget(budgetDayKey.Name); b.Limit > 0 {
		ls = append(ls, limitedTake{take: window(budgetDayKey, b.Limit, b.Window), refundDenied: true,
			denial: problem.CodeBudgetExhausted, what: "the SMS budget for today is spent; try again later"})
	}
	return ls
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
}

// abuseState is what an OTP service remembers of its abuse defences.
type abuseState struct {
	hooks     AbuseHooks
	conv      Conversions
	autoBlock AutoBlocker
	volumes   Volumes
	overrides Overrides // the ops desk's emergency overrides (override.go); nil: none

	mu sync.Mutex
	// exhaustedUntil is, per budget window, the end of the exhaustion
	// period this instance has already logged.
	exhaustedUntil map[string]time.Time
	// countryNoted is, per country, the end of the velocity block this
	// instance last noted in the block index (velocityRefused).
	countryNoted map[string]time.Time
}

func newAbuseState(o OTPOptions) *abuseState {
	return &abuseState{hooks: o.Abuse, conv: o.Conversions, autoBlock: o.AutoBlock, volumes: o.Volumes, overrides: o.Overrides,
		exhaustedUntil: map[string]time.Time{}, countryNoted: map[string]time.Time{}}
}

// budgetRefused counts a refusal by the budget and logs one error per
// exhaustion period (per window, on this instance), not one per request.
func (s *OTP) budgetRefused(ctx context.Context, k limit.Key, res limit.Result) {
	if h := s.abuse.hooks.BudgetRefused; h != nil {
		h(k.Name)
	}
	now := s.now()
	s.abuse.mu.Lock()
	first := !now.Before(s.abuse.exhaustedUntil[k.Name])
	if first {
		s.abuse.exhaustedUntil[k.Name] = now.Add(res.RetryAfter)
	}
	s.abuse.mu.Unlock()
	if first {
		s.log.ErrorContext(ctx, "SMS BUDGET EXHAUSTED: refusing every send until the window ends",
			"window", k.Name, "limit", res.Limit, "retry_after", res.RetryAfter.Round(time.Second).String())
	}
}
