package guard

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/problem"
)

// Emergency overrides (README.md, "Changing limits during an attack"): the
// ops desk tightens the policy file's country, prefix and budget limits,
// limits one carrier of a country, or pauses a country or one of its
// carriers, for a while, on every instance at once. An override
// only ever tightens: what applies is the lower of the file's limit and the
// override's, and removing or outliving an override returns to the file's.

// OverrideKind says what an override tightens.
type OverrideKind string

// The kinds of override.
const (
	// OverrideCountryLimit lowers otp.per_country for one country (Subject,
	// ISO 3166-1 alpha-2, or 001 for non-geographic numbers).
	OverrideCountryLimit OverrideKind = "country_limit"
	// OverrideCountryPause refuses every send to one country.
	OverrideCountryPause OverrideKind = "country_pause"
	// OverrideCarrierLimit limits the sends to one carrier of a country
	// (Subject, "NG/mtn": CarrierSubject) in a fixed window of an hour;
	// OverrideCarrierPause refuses every send to it (carrier_override.go).
	OverrideCarrierLimit OverrideKind = "carrier_limit"
	OverrideCarrierPause OverrideKind = "carrier_pause"
	// OverridePrefixLimit limits the sends to the numbers under one prefix
	// (Subject, "+" and 1 to 15 digits).
	OverridePrefixLimit OverrideKind = "prefix_limit"
	// OverrideBudgetHour and OverrideBudgetDay lower otp.budget.
	OverrideBudgetHour OverrideKind = "budget_per_hour"
	OverrideBudgetDay  OverrideKind = "budget_per_day"
)

// OverrideKinds lists every kind, in the order the ops page offers them.
var OverrideKinds = []OverrideKind{OverrideCountryLimit, OverrideCountryPause, OverrideCarrierLimit, OverrideCarrierPause,
	OverridePrefixLimit, OverrideBudgetHour, OverrideBudgetDay}

// Bounds of an override's life: DefaultOverrideFor when none is given, at
// most MaxOverrideFor, so that a forgotten emergency measure ends by itself.
const (
	DefaultOverrideFor = 24 * time.Hour
	MaxOverrideFor     = 7 * 24 * time.Hour
	// DefaultOverrideWindow is the window of an override whose rule the file
	// does not have (a country or prefix without a limit, a budget that is
	// off): an hour, or a day for the daily budget.
	DefaultOverrideWindow = time.Hour
)

// Override is one emergency measure of the ops desk.
type Override struct {
	ID      int64
	Kind    OverrideKind
	Subject string // the country, carrier ("NG/mtn") or prefix; "" for the budgets
	Limit   int64  // 0 for a pause
	Reason  string
	Author  string
	// CreatedAt and ExpiresAt bound when it applies: from creation until
	// ExpiresAt, by the service's clock.
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Active reports whether o applies at now.
func (o Override) Active(now time.Time) bool { return now.Before(o.ExpiresAt) }

// Overrides are the emergency overrides in force, as this instance last
// loaded them (ops.OverrideCache).
type Overrides interface {
	// ActiveOverrides returns the overrides loaded; expired ones may
	// remain until the next load (the caller checks Active). The slice is
	// never changed after it is returned.
	ActiveOverrides() []Override
}

// OverrideError is the refusal of an override: Field names the field at
// fault (kind, subject, limit, expires_in, reason).
type OverrideError struct {
	Field string
	Err   *problem.Error
}

func (e *OverrideError) Error() string { return e.Err.Error() }

// Unwrap makes the *Error inside readable with errors.As.
func (e *OverrideError) Unwrap() error { return e.Err }

// overrideErr is an invalid_request naming field.
func overrideErr(field, format string, args ...any) error {
	return &OverrideError{Field: field, Err: problem.Errorf(problem.CodeInvalidRequest, "%s: %s", field, fmt.Sprintf(format, args...))}
}

// NormalizeOverride checks o's kind, subject and limit and puts the subject
// in its canonical form (an upper-case country; a carrier as
// CarrierSubject.String, "NG/mtn").
func NormalizeOverride(o Override) (Override, error) {
	o.Subject = strings.TrimSpace(o.Subject)
	switch o.Kind {
	case OverrideCountryLimit, OverrideCountryPause:
		o.Subject = strings.ToUpper(o.Subject)
		if o.Subject != "001" && (len(o.Subject) != 2 || phonenumbers.GetCountryCodeForRegion(o.Subject) == 0) {
			return o, overrideErr("subject", "must be an ISO 3166-1 alpha-2 country code such as NG (or 001 for non-geographic numbers), got %q", o.Subject)
		}
	case OverrideCarrierLimit, OverrideCarrierPause:
		c, err := ParseCarrierSubject(o.Subject)
		if err != nil {
			return o, err
		}
		o.Subject = c.String()
	case OverridePrefixLimit:
		if err := ValidateDenyPattern(o.Subject); err != nil {
			return o, overrideErr("subject", "must be a number prefix: + and 1 to 15 digits, such as +2348031")
		}
	case OverrideBudgetHour, OverrideBudgetDay:
		if o.Subject != "" {
			return o, overrideErr("subject", "must be empty for a budget override")
		}
	default:
		return o, overrideErr("kind", "must be one of %s", joinKinds())
	}
	if o.Kind == OverrideCountryPause || o.Kind == OverrideCarrierPause {
		if o.Limit != 0 {
			return o, overrideErr("limit", "must be empty for a pause: a paused country or carrier gets no sends at all")
		}
	} else if o.Limit < 1 || o.Limit > maxLimit {
		return o, overrideErr("limit", "must be between 1 and %d, got %d", maxLimit, o.Limit)
	}
	return o, nil
}

func joinKinds() string {
	s := make([]string, len(OverrideKinds))
	for i, k := range OverrideKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// FileLimit is the limit the policy p itself sets for what o tightens, and
// the field that sets it; ok is false when p sets none (the rule is off or
// absent: any limit tightens it). A prefix override has no file limit of
// its own unless its prefix is one a file depth counts (prefixDepth): then
// it lowers that depth's counter, and the depth's limit is the file's.
func FileLimit(p OTPPolicy, o Override) (limit int64, field string, ok bool) {
	switch o.Kind {
	case OverridePrefixLimit:
		return prefixDepth(p, o.Subject)
	case OverrideCountryLimit:
		if w, ok := p.PerCountry[o.Subject]; ok {
			return w.Limit, "otp.per_country." + o.Subject + ".limit", true
		}
		if w, ok := p.PerCountry["*"]; ok {
			return w.Limit, "otp.per_country.*.limit", true
		}
	case OverrideBudgetHour:
		if p.Budget.PerHour > 0 {
			return p.Budget.PerHour, "otp.budget.per_hour", true
		}
	case OverrideBudgetDay:
		if p.Budget.PerDay > 0 {
			return p.Budget.PerDay, "otp.budget.per_day", true
		}
	}
	return 0, "", false
}

// prefixDepth is the file's per-prefix depth that counts prefix, judged by
// the length of its country's mobile numbers (libphonenumber's example):
// a depth dropping d digits counts the prefixes d digits shorter. ok is
// false when no depth that is on has that length.
func prefixDepth(p OTPPolicy, prefix string) (limit int64, field string, ok bool) {
	n := len(prefix)
	for cc := 1; cc <= 3 && cc < n; cc++ {
		code, err := strconv.Atoi(prefix[1 : 1+cc])
		if err != nil {
			return 0, "", false
		}
		region := phonenumbers.GetRegionCodeForCountryCode(code)
		if region == "ZZ" {
			continue
		}
		ex := phonenumbers.GetExampleNumberForType(region, phonenumbers.MOBILE)
		if ex == nil {
			return 0, "", false
		}
		full := len(phonenumbers.Format(ex, phonenumbers.E164))
		for i, pw := range append([]PrefixWindow{p.PerPrefix}, p.PrefixDepths...) {
			if pw.Limit > 0 && len(Prefix(strings.Repeat("0", full), pw.DigitsDropped)) == n {
				if i == 0 {
					return pw.Limit, "otp.per_prefix.limit", true
				}
				return pw.Limit, fmt.Sprintf("otp.prefix_depths[%d].limit", i-1), true
			}
		}
		return 0, "", false
	}
	return 0, "", false
}

// CheckTightens refuses an override whose limit is above the file's: an
// override can only tighten (422 override_looser, naming the field).
func CheckTightens(p OTPPolicy, o Override) error {
	file, field, ok := FileLimit(p, o)
	if !ok || o.Limit <= file {
		return nil
	}
	return &OverrideError{Field: "limit", Err: problem.Errorf(problem.CodeOverrideLooser,
		"limit: %d is looser than the policy file's %s (%d); an override can only tighten, so give at most %d",
		o.Limit, field, file, file)}
}

// overridesAt is what the overrides in force at now change in the OTP
// rules; the zero value changes nothing.
type overridesAt struct {
	paused        map[string]time.Time // country -> until
	carrierPaused map[string]time.Time // carrier subject ("NG/mtn") -> until
	country       map[string]int64
	carrier       map[string]int64 // carrier subject -> limit
	prefix        map[string]int64
	hour          int64
	day           int64
	nonEmpty      bool
}

// tighter is the lower of two limits, 0 meaning none.
func tighter(a, b int64) int64 {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// overridesIn gathers the overrides of list in force at now; several of
// one kind and subject apply as the tightest.
func overridesIn(list []Override, now time.Time) overridesAt {
	var at overridesAt
	for _, o := range list {
		if !o.Active(now) {
			continue
		}
		at.nonEmpty = true
		switch o.Kind {
		case OverrideCountryPause:
			if at.paused == nil {
				at.paused = map[string]time.Time{}
			}
			at.paused[o.Subject] = later(at.paused[o.Subject], o.ExpiresAt)
		case OverrideCarrierPause:
			if at.carrierPaused == nil {
				at.carrierPaused = map[string]time.Time{}
			}
			at.carrierPaused[o.Subject] = later(at.carrierPaused[o.Subject], o.ExpiresAt)
		case OverrideCarrierLimit:
			if at.carrier == nil {
				at.carrier = map[string]int64{}
			}
			at.carrier[o.Subject] = tighter(at.carrier[o.Subject], o.Limit)
		case OverrideCountryLimit:
			if at.country == nil {
				at.country = map[string]int64{}
			}
			at.country[o.Subject] = tighter(at.country[o.Subject], o.Limit)
		case OverridePrefixLimit:
			if at.prefix == nil {
				at.prefix = map[string]int64{}
			}
			at.prefix[o.Subject] = tighter(at.prefix[o.Subject], o.Limit)
		case OverrideBudgetHour:
			at.hour = tighter(at.hour, o.Limit)
		case OverrideBudgetDay:
			at.day = tighter(at.day, o.Limit)
		}
	}
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// pauseCover is the country whose pause also covers region, or "":
// libphonenumber gives Guernsey, Jersey and the Isle of Man regions of
// their own, but their numbers are +44 numbers of the UK's plan, and an
// operator pausing GB means +44. Each can still be paused alone.
func pauseCover(region string) string {
	switch region {
	case "GG", "JE", "IM":
		return "GB"
	}
	return ""
}

// countryPause is when the pause of region ends, its covering country's
// (pauseCover) included; ok is false when neither is paused.
func (at overridesAt) countryPause(region string) (until time.Time, ok bool) {
	until, ok = at.paused[region]
	if cover := pauseCover(region); cover != "" {
		if u, paused := at.paused[cover]; paused && (!ok || u.After(until)) {
			until, ok = u, true
		}
	}
	return until, ok
}

// checkPaused refuses a send to a country, or to a carrier of a country,
// one of overrides pauses at now, until the pause ends; the country's
// pause first.
func checkPaused(overrides Overrides, phone Phone, now time.Time) error {
	at := overridesIn(overrides.ActiveOverrides(), now)
	region := phone.Region
	if region == "" {
		region = "001"
	}
	if until, ok := at.countryPause(region); ok {
		return &problem.Error{Code: problem.CodeCountryPaused, Message: "sends to this country are paused by the ops desk; try again later",
			RetryAfter: until.Sub(now)}
	}
	if len(at.carrierPaused) == 0 { // the carrier is looked up only when one is paused
		return nil
	}
	if until, ok := at.carrierPaused[carrierSubject(phone)]; ok {
		return &problem.Error{Code: problem.CodeCarrierPaused, Message: "sends to this carrier are paused by the ops desk; try again later",
			RetryAfter: until.Sub(now)}
	}
	return nil
}
