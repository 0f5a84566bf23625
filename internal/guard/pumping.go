package guard

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nyaruka/phonenumbers"
)

// SMS pumping defences (README.md, "Abuse defences"). Pumping is many different numbers
// in a premium or otherwise lucrative range, requested from rotating
// addresses: per-number and per-IP limits never fire. These rules look at
// what the numbers have in common instead: their country, their type,
// their prefix, and how few of the codes sent to them are ever verified.
// And a global budget bounds what a miss costs.

// PrefixWindow is the fixed-window budget of every number prefix: the
// E.164 number minus its last DigitsDropped digits.
type PrefixWindow struct {
	Limit         int64 // 0: off
	Window        time.Duration
	DigitsDropped int
}

// Budget is the global budget of SMS sent, across all instances: at most
// PerHour in any window of one hour starting at its first send, and PerDay
// in one of 24 hours. 0 turns a window off.
type Budget struct {
	PerHour int64
	PerDay  int64
}

// ConversionMode says what the conversion watch does with a prefix whose
// codes are rarely verified.
type ConversionMode string

// The modes of the conversion watch.
const (
	ConversionOff     ConversionMode = "off"
	ConversionMonitor ConversionMode = "monitor" // log, metric, audit event
	ConversionBlock   ConversionMode = "block"   // and a deny-list entry for the prefix, for BlockFor
)

// ConversionPolicy is the conversion watch: per prefix and per country,
// sends against successful verifies over a sliding hour.
type ConversionPolicy struct {
	Mode     ConversionMode
	MinRate  float64       // verifies / sends below this is suspicious
	MinSends int64         // only judged from this many sends in the hour
	BlockFor time.Duration // how long a block-mode deny entry lasts
}

// ConversionActor is the author of the deny-list entries the conversion
// watch adds; the ops view shows it.
const ConversionActor = "otpguard:conversion-watch"

// ConversionWindow is the sliding window of the conversion watch.
const ConversionWindow = time.Hour

// Defaults of the abuse defences.
const (
	DefaultDigitsDropped = 4
	DefaultMinRate       = 0.2
	DefaultMinSends      = 50
	DefaultBlockFor      = time.Hour
)

// DefaultNumberTypes are the number types allowed when the policy file
// names none: mobiles, and the +1 numbers libphonenumber cannot tell from
// them.
func DefaultNumberTypes() []string { return []string{"mobile", "fixed_line_or_mobile"} }

// DefaultPerPrefix is the per-prefix budget when the policy file names none.
func DefaultPerPrefix() PrefixWindow {
	return PrefixWindow{Limit: 100, Window: time.Hour, DigitsDropped: DefaultDigitsDropped}
}

// DefaultConversion is the conversion watch when the policy file names none.
func DefaultConversion() ConversionPolicy {
	return ConversionPolicy{Mode: ConversionMonitor, MinRate: DefaultMinRate, MinSends: DefaultMinSends,
		BlockFor: DefaultBlockFor}
}

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
	if p.num == nil {
		return NumberType(p.E164)
	}
	t := phonenumbers.GetNumberType(p.num)
	for name, v := range numberTypes {
		if v == t {
			return name
		}
	}
	return "unknown"
}

// Prefix is the number minus its last digitsDropped digits (never less
// than "+" and two digits): the subject of the per-prefix budget and of
// the conversion watch.
func Prefix(e164 string, digitsDropped int) string {
	return e164[:max(min(3, len(e164)), len(e164)-digitsDropped)]
}

var isoCode = regexp.MustCompile(`^[A-Z]{2}$`)

// validateAbuse checks the abuse defences of the OTP policy.
func validateAbuse(o OTPPolicy, bad func(string, string, ...any)) {
	for i, c := range o.AllowedCountries {
		if !isoCode.MatchString(c) {
			bad(fmt.Sprintf("otp.allowed_countries[%d]", i), "must be an upper-case ISO 3166-1 alpha-2 code such as IN, got %q", c)
		}
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
	for _, c := range sortedKeys(o.PerCountry) {
		if c != "*" && !isoCode.MatchString(c) {
			bad("otp.per_country."+c, "must be an upper-case ISO 3166-1 alpha-2 code such as IN, or * for every other country")
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
	c := o.Conversion
	switch c.Mode {
	case "", ConversionOff:
	case ConversionMonitor, ConversionBlock:
		if !(c.MinRate > 0 && c.MinRate <= 1) {
			bad("otp.conversion.min_rate", "must be above 0 and at most 1, got %v", c.MinRate)
		}
		if c.MinSends < 1 || c.MinSends > maxLimit {
			bad("otp.conversion.min_sends", "must be between 1 and %d, got %d", maxLimit, c.MinSends)
		}
		if c.Mode == ConversionBlock && (c.BlockFor < time.Minute || c.BlockFor > maxWindow) {
			bad("otp.conversion.block_for", "must be between 1m and %s with mode: block, got %s", maxWindow, c.BlockFor)
		}
	default:
		bad("otp.conversion.mode", "must be off, monitor or block, got %q", c.Mode)
	}
	for i, p := range o.SafeList {
		if !validDenyPattern(p) {
			bad(fmt.Sprintf("otp.safe_list[%d]", i), "must be '+' followed by 1 to %d digits (a number or a prefix), got %q", maxDenyDigits, p)
		}
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

// fillAbuseDefaults completes a conversion watch the file left empty.
func (o *OTPPolicy) fillAbuseDefaults() {
	if o.Conversion.Mode == "" {
		o.Conversion = DefaultConversion()
	}
	if o.PerPrefix.DigitsDropped == 0 {
		o.PerPrefix.DigitsDropped = DefaultDigitsDropped
	}
}

// safe reports whether the number is on the safe list: it skips the
// velocity and conversion rules, never the budget.
func (s *OTP) safe(e164 string) bool {
	for _, p := range s.policy.SafeList {
		if strings.HasPrefix(e164, p) {
			return true
		}
	}
	return false
}

// checkDestination refuses numbers outside the allowed countries and
// number types.
func (s *OTP) checkDestination(phone Phone) error {
	if c := s.policy.AllowedCountries; len(c) > 0 && !slices.Contains(c, phone.Region) {
		return Errorf(CodeCountryNotAllowed, "codes are not sent to numbers of this country")
	}
	if allowed := s.policy.AllowedNumberTypes; len(allowed) > 0 {
		if t := phone.Type(); !slices.Contains(allowed, t) {
			return Errorf(CodeNumberTypeNotAllowed, "codes are not sent to this type of number (%s)", t)
		}
	}
	return nil
}

// Budget keys: one hash tag for both, so they share a slot on Cluster.
var (
	budgetHourKey = Key{Space: "otp:budget", ID: "global", Name: "hour"}
	budgetDayKey  = Key{Space: "otp:budget", ID: "global", Name: "day"}
)

// abuseLimits are the limits of one send after the number's own:
// per prefix and per country (not for safe-listed numbers), then the
// global budget. When the store cannot answer they fall back like the
// per-IP limit: split (limit / N) with local or open, refused with closed.
func (s *OTP) abuseLimits(phone Phone, safe bool) []limitedTake {
	mode := s.policy.OnStoreError
	if mode == FailLocal { // local_limit is per number: shared limits get their share
		mode = FailOpen
	}
	window := func(k Key, limit int64, w time.Duration) Take {
		return Take{Key: k, Algorithm: FixedWindow, Limit: limit, Window: w, Cost: 1,
			Policy: OTPPolicyName, OnStoreError: mode}
	}
	var ls []limitedTake
	if pp := s.policy.PerPrefix; !safe && pp.Limit > 0 {
		ls = append(ls, limitedTake{
			take:   window(Key{"otp:prefix", Prefix(phone.E164, pp.DigitsDropped), "sends"}, pp.Limit, pp.Window),
			denial: CodePrefixRateLimited, what: "too many codes were sent to numbers like this one; try again later",
		})
	}
	if !safe && len(s.policy.PerCountry) > 0 {
		region := phone.Region
		if region == "" {
			region = "001" // non-geographic numbers (+800, +882...)
		}
		w, ok := s.policy.PerCountry[region]
		if !ok {
			w, ok = s.policy.PerCountry["*"]
		}
		if ok {
			ls = append(ls, limitedTake{
				take:   window(Key{"otp:country", region, "sends"}, w.Limit, w.Window),
				denial: CodeCountryRateLimited, what: "too many codes were sent to this country; try again later",
			})
		}
	}
	// The budget refunds its own denied hit: a spent budget then stays at
	// exactly its limit, so a later refund (a send the provider refused)
	// frees a message at once.
	if b := s.policy.Budget.PerHour; b > 0 {
		ls = append(ls, limitedTake{take: window(budgetHourKey, b, time.Hour), refundDenied: true,
			denial: CodeBudgetExhausted, what: "the SMS budget for this hour is spent; try again later"})
	}
	if b := s.policy.Budget.PerDay; b > 0 {
		ls = append(ls, limitedTake{take: window(budgetDayKey, b, 24*time.Hour), refundDenied: true,
			denial: CodeBudgetExhausted, what: "the SMS budget for today is spent; try again later"})
	}
	return ls
}

// budgetTakes are the budget takes among passed: what a send that surely
// did not leave gives back.
func budgetTakes(passed []Take) []Take {
	var out []Take
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
}

// abuseState is what an OTP service remembers of its abuse defences.
type abuseState struct {
	hooks     AbuseHooks
	conv      Conversions
	autoBlock AutoBlocker

	mu sync.Mutex
	// exhaustedUntil is, per budget window, the end of the exhaustion
	// period this instance has already logged.
	exhaustedUntil map[string]time.Time
}

func newAbuseState(o OTPOptions) *abuseState {
	return &abuseState{hooks: o.Abuse, conv: o.Conversions, autoBlock: o.AutoBlock, exhaustedUntil: map[string]time.Time{}}
}

// budgetRefused counts a refusal by the budget and logs one error per
// exhaustion period (per window, on this instance), not one per request.
func (s *OTP) budgetRefused(ctx context.Context, k Key, res Result) {
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
