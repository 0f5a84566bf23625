package guard

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/limit"
)

// Bounds that keep policies sane: a typo such as "window: 10h0000m" should
// fail at start-up, not lock numbers out for a year.
const (
	maxLimit      = limit.MaxValue
	maxWindow     = limit.MaxWindow
	maxCodeTTL    = 10 * time.Minute
	minCodeTTL    = 30 * time.Second
	maxAttempts   = 20
	maxCooldown   = time.Hour
	maxPolicyName = 64
)

var policyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ReservedPolicyNames are the policy label values otpguard gives its own
// decisions in metrics (otpguard_decisions_total, _fallback_decisions_total):
// the OTP policy ("otp"), its two routes, and a /limits/check refused whole.
// A limit policy may not take one, or its series would mix with theirs.
var ReservedPolicyNames = []string{OTPPolicyName, "otp_send", "otp_verify", "limits"}

// Validate checks every policy and returns all problems at once, each naming
// its field, e.g. `limits.api.capacity: must be between 1 and 1000000000`.
func (p *Policies) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	validateOTP(p.OTP, bad)
	validateChannels(p.OTP.Channels, bad)
	validateFallback(p.OTP.FallbackChannel, bad)
	for _, name := range p.LimitNames() {
		validateLimit(name, p.Limits[name], bad)
	}
	if err := validateServices(p.Services, p.OTP); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateOTP checks the OTP policy: its code, its own limits, its
// message, its fallback, and its abuse rules.
func validateOTP(o OTPPolicy, bad func(string, string, ...any)) {
	if o.CodeLength < 6 || o.CodeLength > 10 {
		bad("otp.code_length", "must be between 6 and 10 digits, got %d", o.CodeLength)
	}
	if o.CodeTTL < minCodeTTL || o.CodeTTL > maxCodeTTL {
		bad("otp.code_ttl", "must be between %s and %s, got %s", minCodeTTL, maxCodeTTL, o.CodeTTL)
	}
	if o.MaxVerifyAttempts < 1 || o.MaxVerifyAttempts > maxAttempts {
		bad("otp.max_verify_attempts", "must be between 1 and %d, got %d", maxAttempts, o.MaxVerifyAttempts)
	}
	if o.Cooldown < 0 || o.Cooldown > maxCooldown {
		bad("otp.cooldown", "must be between 0 (off) and %s, got %s", maxCooldown, o.Cooldown)
	}
	if o.Cooldown%time.Millisecond != 0 {
		bad("otp.cooldown", "must be a whole number of milliseconds")
	}
	validateWindow("otp.per_phone", o.PerPhone, bad)
	validateWindow("otp.per_ip", o.PerIP, bad)
	if o.DefaultRegion != "" {
		validateRegion("otp.default_region", strings.ToUpper(o.DefaultRegion), bad)
	}
	validateMessage("otp.message", o.Message, bad)
	for _, l := range slices.Sorted(maps.Keys(o.Messages)) {
		field := "otp.messages." + l
		if c, ok := CanonicalLocale(l); !ok {
			bad(field, "%q is not a supported locale: use one of %s", l, strings.Join(supportedLocales, ", "))
		} else if c != l {
			bad(field, "write the locale as %q", c)
		}
		validateMessage(field, o.Messages[l], bad)
	}
	limit.ValidateFallback("otp", o.OnStoreError, o.LocalLimit, bad)
	if o.Mode != "" && o.Mode != limit.ModeExact {
		bad("otp.mode", "OTP limits are always exact: sync mode would let codes through past the limit")
	}
	validateAbuse(o, bad)
}

// validateMessage checks an SMS text: it carries the code, and fits.
func validateMessage(field, m string, bad func(string, string, ...any)) {
	if !strings.Contains(m, "{code}") {
		bad(field, "must contain {code}")
	} else if len(m) > 300 {
		bad(field, "must be at most 300 characters")
	}
}

// validateLimit checks one limit policy: its name, its algorithm's
// figures, its fallback and its mode.
func validateLimit(name string, l limit.Policy, bad func(string, string, ...any)) {
	field := "limits." + name
	if len(name) > maxPolicyName || !policyName.MatchString(name) {
		bad(field, "policy names are lower-case letters, digits, _ and -, at most %d characters", maxPolicyName)
	}
	if slices.Contains(ReservedPolicyNames, name) {
		bad(field, "%q is the name of one of otpguard's own policies in metrics (%s are reserved); choose another name",
			name, strings.Join(ReservedPolicyNames, ", "))
	}
	l.Validate(field, bad)
}

// validateWindow checks an OTP limit's window as a fixed window's.
func validateWindow(field string, w Window, bad func(string, string, ...any)) {
	limit.ValidateWindow(field, w.Limit, w.Window, bad)
}

var isoCode = regexp.MustCompile(`^[A-Z]{2}$`)

// regionHints are codes people write for a region that libphonenumber
// knows by another: the United Kingdom is GB, Greece (EL in the EU) is GR.
var regionHints = map[string]string{"UK": "GB", "EL": "GR"}

// validateRegion checks that code is a region libphonenumber knows (an
// upper-case ISO 3166-1 alpha-2 code it has numbering data for), and says
// which code was meant where it can. It reports whether code is good.
func validateRegion(field, code string, bad func(string, string, ...any)) bool {
	if !isoCode.MatchString(code) {
		if up := strings.ToUpper(code); isoCode.MatchString(up) && phonenumbers.GetSupportedRegions()[up] {
			bad(field, "must be an upper-case ISO 3166-1 alpha-2 code: %q, not %q", up, code)
		} else {
			bad(field, "must be an upper-case ISO 3166-1 alpha-2 code such as IN, got %q", code)
		}
		return false
	}
	if phonenumbers.GetSupportedRegions()[code] {
		return true
	}
	if hint, ok := regionHints[code]; ok {
		bad(field, "%q is not a region code libphonenumber knows: use %q", code, hint)
	} else {
		bad(field, "%q is not a region code libphonenumber knows (ISO 3166-1 alpha-2, e.g. IN, GB, US)", code)
	}
	return false
}

// validateAbuse checks the abuse defences of the OTP policy.
func validateAbuse(o OTPPolicy, bad func(string, string, ...any)) {
	for i, c := range o.AllowedCountries {
		validateRegion(fmt.Sprintf("otp.allowed_countries[%d]", i), c, bad)
	}
	for i, t := range o.AllowedNumberTypes {
		if _, ok := numberTypes[t]; !ok {
			names := make([]string, 0, len(numberTypes))
			for n := range numberTypes {
				names = append(names, n)
			}
			slices.Sort(names)
			bad(fmt.Sprintf("otp.allowed_number_types[%d]", i), "must be one of %s, got %q", strings.Join(names, ", "), t)
		}
	}
	if o.PerPrefix.Limit != 0 {
		validateWindow("otp.per_prefix", Window{Limit: o.PerPrefix.Limit, Window: o.PerPrefix.Window}, bad)
	}
	if o.PerPrefix.Limit != 0 || o.Conversion.Mode != "" && o.Conversion.Mode != ConversionOff {
		if d := o.PerPrefix.DigitsDropped; d < 1 || d > 8 {
			bad("otp.per_prefix.digits_dropped", "must be between 1 and 8, got %d", d)
		}
	}
	depths := map[int]string{}
	if o.PerPrefix.Limit != 0 || o.Conversion.Mode != "" && o.Conversion.Mode != ConversionOff {
		depths[o.PerPrefix.DigitsDropped] = "otp.per_prefix"
	}
	for i, d := range o.PrefixDepths {
		field := fmt.Sprintf("otp.prefix_depths[%d]", i)
		validateWindow(field, Window{Limit: d.Limit, Window: d.Window}, bad)
		if d.DigitsDropped < 1 || d.DigitsDropped > 10 {
			bad(field+".digits_dropped", "must be between 1 and 10, got %d", d.DigitsDropped)
		} else if other, ok := depths[d.DigitsDropped]; ok {
			bad(field+".digits_dropped", "%d digits are already dropped by %s: one counter per depth", d.DigitsDropped, other)
		}
		depths[d.DigitsDropped] = field
	}
	validateVelocity(o.CountryVelocity, bad)
	validateChallenge(o.Challenge, bad)
	validateTrust(o.Trust, bad)
	validateRisk(o.Risk, bad)
	for _, c := range sortedKeys(o.PerCountry) {
		if c != "*" && !validateRegion("otp.per_country."+c, c, bad) {
			continue
		}
		validateWindow("otp.per_country."+c, o.PerCountry[c], bad)
	}
	if o.Budget.PerHour < 0 || o.Budget.PerHour > maxLimit {
		bad("otp.budget.per_hour", "must be between 0 (off) and %d, got %d", maxLimit, o.Budget.PerHour)
	}
	if o.Budget.PerDay < 0 || o.Budget.PerDay > maxLimit {
		bad("otp.budget.per_day", "must be between 0 (off) and %d, got %d", maxLimit, o.Budget.PerDay)
	}
	validateConversion(o.Conversion, bad)
	for i, p := range o.AllowHighRisk {
		if !validDenyPattern(p) || !highRiskPrefix(p) {
			bad(fmt.Sprintf("otp.allow_high_risk[%d]", i), "must be '+' and digits starting with a non-geographic calling code (%s), got %q",
				strings.Join(sortedCodes(), ", "), p)
		}
	}
	for i, p := range o.SafeList {
		if !validDenyPattern(p) {
			bad(fmt.Sprintf("otp.safe_list[%d]", i), "must be '+' followed by 1 to %d digits (a number or a prefix), got %q", maxDenyDigits, p)
		}
	}
}

// validateVelocity checks otp.country_velocity.
func validateVelocity(v CountryVelocity, bad func(string, string, ...any)) {
	switch v.Mode {
	case VelocityOff:
		return
	case VelocityEnforce:
	default:
		bad("otp.country_velocity.mode", "must be enforce or off, got %q", v.Mode)
		return
	}
	if v.Floor < 1 || v.Floor > maxLimit {
		bad("otp.country_velocity.floor", "must be between 1 and %d, got %d", maxLimit, v.Floor)
	}
	if !(v.Factor >= 1 && v.Factor <= 1000) {
		bad("otp.country_velocity.factor", "must be between 1 and 1000, got %v", v.Factor)
	}
	if v.Lookback < time.Hour || v.Lookback > maxWindow || v.Lookback%time.Hour != 0 {
		bad("otp.country_velocity.lookback", "must be whole hours between 1h and %s, got %s", maxWindow, v.Lookback)
	}
	if !(v.MinuteShare >= 0 && v.MinuteShare <= 1) {
		bad("otp.country_velocity.minute_share", "must be between 0 (off) and 1, got %v", v.MinuteShare)
	}
	if v.UnverifiedFloor < 0 || v.UnverifiedFloor > maxLimit {
		bad("otp.country_velocity.unverified_floor", "must be between 0 (off) and %d, got %d", maxLimit, v.UnverifiedFloor)
	}
	if !(v.UnverifiedShare >= 0 && v.UnverifiedShare <= 10) {
		bad("otp.country_velocity.unverified_share", "must be between 0 and 10, got %v", v.UnverifiedShare)
	}
	if v.GrowthPerDay != 0 && !(v.GrowthPerDay >= 1 && v.GrowthPerDay <= 1000) {
		bad("otp.country_velocity.growth_per_day", "must be between 1 and 1000 (0: the default, %v), got %v", float64(DefaultGrowthPerDay), v.GrowthPerDay)
	}
	validateColdRoom(v, bad)
	if v.CarrierSplit && !(v.CarrierFloorShare > 0 && v.CarrierFloorShare <= 1) {
		bad("otp.country_velocity.carrier_floor_share", "must be above 0 and at most 1 while carrier_split is on, got %v", v.CarrierFloorShare)
	}
	if v.QuarantineFor < time.Minute || v.QuarantineFor > maxWindow {
		bad("otp.country_velocity.quarantine_for", "must be between 1m and %s, got %s", maxWindow, v.QuarantineFor)
	}
	for _, c := range sortedKeys(v.Expected) {
		if !isoCode.MatchString(c) && c != "001" {
			bad("otp.country_velocity.expected."+c, "must be an upper-case ISO 3166-1 alpha-2 code such as NG")
		} else if n := v.Expected[c]; n < 1 || n > maxLimit {
			bad("otp.country_velocity.expected."+c, "must be between 1 and %d sends per hour, got %d", maxLimit, n)
		}
	}
}

// validateColdRoom checks the cold room's settings of otp.country_velocity.
func validateColdRoom(v CountryVelocity, bad func(string, string, ...any)) {
	if v.ColdPerHour < 0 || v.ColdPerHour > maxLimit {
		bad("otp.country_velocity.cold_per_hour", "must be between 0 (off) and %d sends per hour, got %d", maxLimit, v.ColdPerHour)
		return
	}
	if v.ColdPerHour == 0 {
		return
	}
	if v.ColdPerDay != 0 && (v.ColdPerDay < v.ColdPerHour || v.ColdPerDay > maxLimit) {
		bad("otp.country_velocity.cold_per_day", "must be 0 (no daily window) or between cold_per_hour (%d) and %d sends per day, got %d",
			v.ColdPerHour, maxLimit, v.ColdPerDay)
	}
	if v.ColdBelow < 1 || v.ColdBelow > maxLimit {
		bad("otp.country_velocity.cold_below", "must be between 1 and %d verified sends in a country's busiest hour, got %d", maxLimit, v.ColdBelow)
	}
	if !(v.ColdWarmConversion >= 0 && v.ColdWarmConversion <= 1) {
		bad("otp.country_velocity.cold_warm_conversion", "must be between 0 (off) and 1, the share of a country's day-old sends verified, got %v", v.ColdWarmConversion)
	}
}

// validateConversion checks otp.conversion.
func validateConversion(c ConversionPolicy, bad func(string, string, ...any)) {
	switch c.Mode {
	case "", ConversionOff:
	case ConversionMonitor, ConversionBlock:
		if !(c.MinRate > 0 && c.MinRate <= 1) {
			bad("otp.conversion.min_rate", "must be above 0 and at most 1, got %v", c.MinRate)
		}
		if c.MinSends < 1 || c.MinSends > maxLimit {
			bad("otp.conversion.min_sends", "must be between 1 and %d, got %d", maxLimit, c.MinSends)
		}
		if c.Delay < 0 || c.Delay > 30*time.Minute {
			bad("otp.conversion.delay", "must be between 0 and 30m, got %s", c.Delay)
		}
		if c.Mode == ConversionBlock && (c.BlockFor < time.Minute || c.BlockFor > maxWindow) {
			bad("otp.conversion.block_for", "must be between 1m and %s with mode: block, got %s", maxWindow, c.BlockFor)
		}
	default:
		bad("otp.conversion.mode", "must be off, monitor or block, got %q", c.Mode)
	}
	if !(c.Relative >= 0 && c.Relative <= 1) {
		bad("otp.conversion.relative", "must be between 0 (off) and 1, got %v", c.Relative)
	}
	if c.HistoryMinSends < 0 || c.HistoryMinSends > maxLimit {
		bad("otp.conversion.history_min_sends", "must be between 0 (any history) and %d, got %d", maxLimit, c.HistoryMinSends)
	}
}

// validateTrust checks otp.trust.
func validateTrust(t TrustPolicy, bad func(string, string, ...any)) {
	if t.VerifiedWithin < 0 || t.VerifiedWithin > 3*365*24*time.Hour {
		bad("otp.trust.verified_within", "must be between 0 (off) and 26280h (3 years), got %s", t.VerifiedWithin)
	}
	if t.Floor < 1 || t.Floor > maxLimit {
		bad("otp.trust.floor", "must be between 1 and %d, got %d", maxLimit, t.Floor)
	}
	if !(t.Factor >= 1 && t.Factor <= 1000) {
		bad("otp.trust.factor", "must be between 1 and 1000, got %v", t.Factor)
	}
	if t.HoldFor < 0 || t.HoldFor > maxHoldFor {
		bad("otp.trust.hold_for", "must be between 0 (never held) and %s, got %s", maxHoldFor, t.HoldFor)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
