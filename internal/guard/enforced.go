package guard

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// Enforced is the OTP policy's shared limits (per prefix, per country,
// the spend budget) as a send meets them at one moment: the policy file's,
// tightened by the ops desk's overrides in force (override.go). The send
// path takes its limits from here (abuseLimits), and so do the attack view
// and the budget gauges, so that what the desk shows is what a send is
// refused by.
type Enforced struct {
	policy OTPPolicy
	over   overridesAt
}

// EnforcedAt is p as the overrides in force at now make it; overrides may
// be nil (none).
func EnforcedAt(p OTPPolicy, overrides Overrides, now time.Time) Enforced {
	var list []Override
	if overrides != nil {
		list = overrides.ActiveOverrides()
	}
	return Enforced{policy: p, over: overridesIn(list, now)}
}

// InForce is one limit as enforced.
type InForce struct {
	Limit  int64 // 0: no limit
	Window time.Duration
	// Override is true when an emergency override sets Limit: it is at or
	// below the file's limit, or the file has none.
	Override bool
}

// tightest is the limit in force of a file's limit and an override's (0
// meaning none for both), and whether the override sets it: on a tie the
// override is what holds the limit there should the file be loosened.
func tightest(file, over int64) (int64, bool) {
	if over > 0 && (file <= 0 || over <= file) {
		return over, true
	}
	return max(file, 0), false
}

// Budget is the spend budget's limit of one window, "hour" or "day"
// (Limit 0: off).
func (e Enforced) Budget(window string) InForce {
	file, over, w := e.policy.Budget.PerHour, e.over.hour, time.Hour
	if window == budgetDayKey.Name {
		file, over, w = e.policy.Budget.PerDay, e.over.day, 24*time.Hour
	}
	l, o := tightest(file, over)
	if l == 0 {
		return InForce{}
	}
	return InForce{Limit: l, Window: w, Override: o}
}

// Country is the per-country limit of region ("" or "001" for
// non-geographic numbers; Limit 0: none), and the key of otp.per_country
// that sets the file's part of it: the region, "*", or "" when only an
// override limits the country (over DefaultOverrideWindow).
func (e Enforced) Country(region string) (InForce, string) {
	if region == "" {
		region = "001"
	}
	key := region
	w, ok := e.policy.PerCountry[region]
	if !ok {
		key = "*"
		w, ok = e.policy.PerCountry["*"]
	}
	if !ok {
		key, w = "", Window{Window: DefaultOverrideWindow}
	}
	l, o := tightest(w.Limit, e.over.country[region])
	if l == 0 {
		return InForce{}, ""
	}
	return InForce{Limit: l, Window: w.Window, Override: o}, key
}

// Prefix is the limit on prefix counted at the file's prefix depth pw
// (Limit 0: the depth is off, and an override of the prefix is counted
// on its own: see abuseLimits).
func (e Enforced) Prefix(prefix string, pw PrefixWindow) InForce {
	if pw.Limit <= 0 {
		return InForce{}
	}
	l, o := tightest(pw.Limit, e.over.prefix[prefix])
	return InForce{Limit: l, Window: pw.Window, Override: o}
}

// Carrier is the ops desk's limit on the sends to the carrier subject
// (CarrierSubject.String, "NG/mtn") in DefaultOverrideWindow (Limit 0:
// none). The policy file has no limit of its own per carrier: an
// override's is the only one, counted on a counter of its own.
func (e Enforced) Carrier(subject string) InForce {
	l := e.over.carrier[subject]
	if l <= 0 {
		return InForce{}
	}
	return InForce{Limit: l, Window: DefaultOverrideWindow, Override: true}
}

// CountryPause is when the ops desk's pause of region ("001" for
// non-geographic numbers) ends, a pause of GB covering GG, JE and IM as a
// send meets it; ok is false when it is not paused.
func (e Enforced) CountryPause(region string) (until time.Time, ok bool) {
	return e.over.countryPause(region)
}

// CarrierPause is when the ops desk's pause of the carrier subject ends;
// ok is false when it is not paused.
func (e Enforced) CarrierPause(subject string) (until time.Time, ok bool) {
	until, ok = e.over.carrierPaused[subject]
	return until, ok
}

// Prefix is the number minus its last digitsDropped digits (never less
// than "+" and two digits): the subject of the per-prefix limit and of
// the conversion watch.
func Prefix(e164 string, digitsDropped int) string {
	return e164[:max(min(3, len(e164)), len(e164)-digitsDropped)]
}

// prefixLimits are p's per_prefix and the coarser prefix_depths, finest
// first. A depth's key names only the prefix, so two depths that drop the same
// number of digits would share a counter: validation refuses that.
func prefixLimits(p OTPPolicy) []PrefixWindow {
	return append([]PrefixWindow{p.PerPrefix}, p.PrefixDepths...)
}

// enforced is the service's policy as the overrides in force at now make it.
func (s *pumping) enforced(now time.Time) Enforced {
	return EnforcedAt(s.policy, s.overrides, now)
}

// unheldRules are the abuse rules of a send by the fallback channel
// (fallback.go): the ops desk's overrides and the spend budget, none of
// the file's automatic limits, no volume count.
func (s *pumping) unheldRules(phone Phone) abuseTakes {
	return abuseTakes{limits: s.abuseLimits(phone, s.safe.has(phone.E164), true)}
}

// abuseLimits are the limits of one send after the number's own:
// per prefix, per carrier (an override's only) and per country (not for safe-listed numbers; with
// operatorOnly, for a solved or trusted send, only those an operator's
// override set), then the spend budget. The file's own prefix and country
// limits are marked Automatic (the store skips them once it finds the
// number trusted). When the store cannot answer they fall back like the
// per-IP limit: split (limit / N) with local or open, refused with closed.
func (s *pumping) abuseLimits(phone Phone, safe, operatorOnly bool) []limitedTake {
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
	depths := prefixLimits(s.policy)
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
			take:   auto(window(limit.Key{Space: "otp:prefix", ID: phone.in(prefix), Name: "sends"}, l.Limit, l.Window), !l.Override),
			denial: problem.CodePrefixRateLimited, what: "too many codes were sent to numbers like this one; try again later",
			operator: l.Override,
		})
	}
	for _, prefix := range slices.Sorted(maps.Keys(e.over.prefix)) { // the prefix overrides the file's depths do not count
		if safe || slices.Contains(seen, prefix) || !strings.HasPrefix(phone.E164, prefix) {
			continue
		}
		w := s.policy.PerPrefix.Window
		if w <= 0 {
			w = DefaultOverrideWindow
		}
		ls = append(ls, limitedTake{
			take:   window(limit.Key{Space: "otp:prefix", ID: phone.in(prefix), Name: "sends"}, e.over.prefix[prefix], w),
			denial: problem.CodePrefixRateLimited, what: "too many codes were sent to numbers like this one; try again later",
			operator: true,
		})
	}
	if !safe && e.over.carrier != nil { // the ops desk's limit on the number's carrier, on a counter of its own
		subject := carrierSubject(phone)
		if l := e.Carrier(subject); l.Limit > 0 {
			ls = append(ls, limitedTake{
				take:   window(limit.Key{Space: "otp:carrier", ID: phone.in(subject), Name: "sends"}, l.Limit, l.Window),
				denial: problem.CodeCarrierRateLimited, what: "too many codes were sent to numbers of this carrier; try again later",
				operator: true,
			})
		}
	}
	if !safe && (len(s.policy.PerCountry) > 0 || e.over.country != nil) {
		region := phone.Region
		if region == "" {
			region = "001" // non-geographic numbers (+800, +882...)
		}
		if l, _ := e.Country(region); l.Limit > 0 && (!operatorOnly || l.Override) {
			ls = append(ls, limitedTake{
				take:   auto(window(limit.Key{Space: "otp:country", ID: phone.in(region), Name: "sends"}, l.Limit, l.Window), !l.Override),
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
