package guard

import "time"

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

// enforced is the service's policy as the overrides in force at now make it.
func (s *pumping) enforced(now time.Time) Enforced {
	return EnforcedAt(s.policy, s.overrides, now)
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
