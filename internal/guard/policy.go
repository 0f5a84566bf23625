package guard

import (
	"sort"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// Window is a fixed-window limit: at most Limit events per Window, the window
// starting at the first event.
type Window struct {
	Limit  int64
	Window time.Duration
}

// OTPPolicyName is the name the OTP policy goes by in Take.Policy and in
// the fallback's status.
const OTPPolicyName = "otp"

// OTPPolicy is the rule set of /otp/send and /otp/verify.
type OTPPolicy struct {
	CodeLength        int
	CodeTTL           time.Duration
	MaxVerifyAttempts int
	Cooldown          time.Duration
	PerPhone          Window
	PerIP             Window
	// DefaultRegion (ISO 3166-1 alpha-2) is assumed for numbers written
	// without a country calling code; empty requires international format.
	DefaultRegion string
	// Message is the SMS text; "{code}" is replaced by the code.
	Message string
	// Messages are the SMS texts of locales (a supported locale, as
	// Twilio spells it -> a text like Message): a send that names a
	// locale gets its text, else its base language's, else Message
	// (locale.go).
	Messages map[string]string
	// Mode exists to be refused: OTP limits are always exact.
	Mode         limit.Mode
	OnStoreError limit.FallbackMode
	// LocalLimit is the per-instance send limit per number and window
	// when OnStoreError is "local".
	LocalLimit int64

	// The abuse defences (pumping.go, conversion.go; README.md, "Abuse defences").
	// AllowedCountries (ISO codes) limits where codes go; empty: anywhere.
	AllowedCountries []string
	// AllowedNumberTypes (libphonenumber's types: mobile, fixed_line,
	// fixed_line_or_mobile, toll_free, premium_rate, ...); empty: any.
	AllowedNumberTypes []string
	// AllowHighRisk are prefixes of non-geographic numbers (+870, +881,
	// +882 16 ...) that may receive codes; every other one is refused
	// (highrisk.go). Default none.
	AllowHighRisk []string
	PerPrefix     PrefixWindow
	// PrefixDepths are coarser prefix limits beside PerPrefix: a campaign
	// that spreads over more digits than PerPrefix drops meets one of them.
	PrefixDepths    []PrefixWindow
	PerCountry      map[string]Window // ISO code or "*" -> limit
	CountryVelocity CountryVelocity
	Budget          Budget
	Conversion      ConversionPolicy
	SafeList        []string // numbers or prefixes: no velocity or conversion rules
	// Challenge is otp.challenge: a challenge before an automatic refusal
	// (challenge.go).
	Challenge ChallengePolicy
	Trust     TrustPolicy
	// Risk is otp.risk: the network's risk score (risk.go).
	Risk RiskPolicy
	// Channels is otp.channels: each channel's own per-number window and
	// price in the budget (channel.go); a channel it leaves out has its
	// default (DefaultChannelPolicies).
	Channels map[string]ChannelPolicy
	// FallbackChannel is otp.fallback_channel: the channel an SMS send
	// that a challenge or an automatic rule holds is offered instead, and
	// which the automatic rules do not hold (fallback.go); "" none.
	FallbackChannel string
}

// PrefixWindow is the fixed-window limit of every number prefix: the
// E.164 number minus its last DigitsDropped digits.
type PrefixWindow struct {
	Limit         int64 // 0: off
	Window        time.Duration
	DigitsDropped int
}

// CountryVelocity is the baseline-relative limit on the sends to each
// country (velocity.go): in the hour under way (an hour bucket of the
// clock), a country may send at most max(floor, Factor x baseline), where
// the baseline is the country's busiest *credited* hour over Lookback and
// the floor is Floor, or Expected[country] when that is higher. An hour's
// credit is its verified sends: an hour nobody verified in teaches the
// baseline nothing, and a campaign verifying under 1/Factor of its codes
// cannot raise its own limit.
type CountryVelocity struct {
	Mode     VelocityMode
	Floor    int64            // sends per hour a country with no history gets
	Factor   float64          // how far above its baseline a country may go
	Lookback time.Duration    // how far back the baseline looks (whole hours)
	Expected map[string]int64 // ISO code -> expected sends per hour: that country's floor
	// MinuteShare (0: off) is the most of the hour's limit one minute of
	// the clock may take, at least the floor: a burst cannot spend a
	// country's hour in one minute. A tenth of it while quarantined.
	MinuteShare float64
	// QuarantineFor is how long a country the conversion watch (block mode)
	// finds unverified keeps a tenth of its floor.
	QuarantineFor time.Duration
	// UnverifiedFloor (0: off) and UnverifiedShare are the unverified
	// budget (unverified.go): the most sends of the hour its verifies do
	// not back, max(UnverifiedFloor, UnverifiedShare x baseline).
	UnverifiedFloor int64
	UnverifiedShare float64
	// ColdPerHour (0: off) and ColdPerDay (0: no daily window) are the cold
	// room (coldroom.go): the untrusted sends of every country whose
	// baseline is below ColdBelow, together, per hour and per day, on top
	// of each country's own limits. A country in Expected is never cold.
	ColdPerHour int64
	ColdPerDay  int64
	ColdBelow   int64
	// ColdWarmConversion (0: off) is what a country's day-old new-number
	// hours must show, taken together, to warm it: at least
	// conversion.history_min_sends sends, at least this share of them
	// verified. A ring that verifies half its codes in the room would
	// otherwise warm its country a day later and be judged by its own
	// conversion (coldroom.go).
	ColdWarmConversion float64
	// CarrierSplit: each country's room is split among its carriers by
	// their share of its verified sends (carriershare.go); each carrier's
	// floors are at least CarrierFloorShare of the country's (at least 1).
	CarrierSplit      bool
	CarrierFloorShare float64
	// GrowthPerDay (0: off; the policy file's default 2) is the bounded
	// pace (pace.go): how many times a day a country's baseline, and its
	// trusted tier's, may grow.
	GrowthPerDay float64
}

// VelocityMode turns the country velocity rule on or off.
type VelocityMode string

// The modes of the country velocity rule.
const (
	VelocityOff     VelocityMode = "off"
	VelocityEnforce VelocityMode = "enforce"
)

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
	MinSends int64         // only judged from this many matured sends in the hour
	BlockFor time.Duration // how long a block-mode deny entry lasts
	// Delay is how long a code has to be verified before the watch counts
	// it as a send: a send younger than Delay is neither converted nor
	// unconverted yet, so a burst of real sign-ins never looks unverified.
	Delay time.Duration
	// Relative (0: off) judges a subject against its country's own normal
	// conversion too: below Relative x normal is suspicious even above
	// MinRate (85 % -> 25 %). The normal is the velocity rule's, known
	// from HistoryMinSends sends of its lookback.
	Relative        float64
	HistoryMinSends int64
}

// Policies is everything the policy file configures.
type Policies struct {
	OTP    OTPPolicy
	Limits map[string]limit.Policy
	// Services are the tenants of the Verify routes (service.go); none:
	// the default service only, reached by the API keys.
	Services []Service
}

// DefaultPolicies are the policies used where the file says nothing.
func DefaultPolicies() Policies {
	return Policies{
		OTP: OTPPolicy{
			CodeLength:        6,
			CodeTTL:           5 * time.Minute,
			MaxVerifyAttempts: 5,
			Cooldown:          30 * time.Second,
			PerPhone:          Window{Limit: 3, Window: 10 * time.Minute},
			PerIP:             Window{Limit: 20, Window: time.Hour},
			Message:           DefaultMessage,
			OnStoreError:      limit.FallbackClosed,
			// The abuse defences (README.md, "Abuse defences").
			AllowedNumberTypes: DefaultNumberTypes(),
			PerPrefix:          DefaultPerPrefix(),
			PrefixDepths:       DefaultPrefixDepths(),
			CountryVelocity:    DefaultCountryVelocity(),
			Conversion:         DefaultConversion(),
			Challenge:          DefaultChallenge(),
			Trust:              DefaultTrust(),
			Risk:               DefaultRisk(),
			Channels:           DefaultChannelPolicies(),
		},
		Limits: map[string]limit.Policy{
			"default": {Algorithm: limit.TokenBucket, Capacity: 50, RefillPerSecond: 5, OnStoreError: limit.FallbackOpen},
		},
	}
}

// Defaults of the abuse defences.
const (
	DefaultDigitsDropped = 4
	DefaultMinRate       = 0.2
	DefaultMinSends      = 20
	DefaultBlockFor      = time.Hour
	DefaultConvDelay     = 2 * time.Minute
	DefaultRelative      = 0.5
	DefaultHistoryMin    = 200

	DefaultVelocityFloor    = 50
	DefaultVelocityFactor   = 3
	DefaultVelocityLookback = 7 * 24 * time.Hour
	DefaultQuarantineFor    = 24 * time.Hour
	DefaultMinuteShare      = 0.1
	DefaultUnverifiedFloor  = 20
	DefaultUnverifiedShare  = 0.1
	DefaultGrowthPerDay     = 2
	DefaultColdPerHour      = 30
	DefaultColdPerDay       = 150
	DefaultColdBelow        = 10
	// DefaultColdWarmConversion is the share of a country's day-old new
	// numbers that must have verified for them to warm it.
	DefaultColdWarmConversion = 0.8
)

// DefaultNumberTypes are the number types allowed when the policy file
// names none: mobiles, and the +1 numbers libphonenumber cannot tell from
// them.
func DefaultNumberTypes() []string { return []string{"mobile", "fixed_line_or_mobile"} }

// DefaultPerPrefix is the per-prefix limit when the policy file names none.
func DefaultPerPrefix() PrefixWindow {
	return PrefixWindow{Limit: 100, Window: time.Hour, DigitsDropped: DefaultDigitsDropped}
}

// DefaultPrefixDepths are the coarser prefix limits when the policy file
// names none: 100 times the numbers of the default per_prefix get 10 times
// its limit, 1000 times the numbers 30 times: real traffic gathers in few
// ranges, a campaign spreads over them.
func DefaultPrefixDepths() []PrefixWindow {
	return []PrefixWindow{
		{Limit: 1000, Window: time.Hour, DigitsDropped: 6},
		{Limit: 3000, Window: time.Hour, DigitsDropped: 7},
	}
}

// DefaultCountryVelocity is the country velocity rule when the policy file
// names none: on, 50 an hour for a country without history, 3 times the
// busiest credited hour of the last 7 days for one with; the untrusted
// sends of every country under 10 verified sends in its busiest hour
// share one room of 30 an hour and 150 a day.
func DefaultCountryVelocity() CountryVelocity {
	return CountryVelocity{Mode: VelocityEnforce, Floor: DefaultVelocityFloor, Factor: DefaultVelocityFactor,
		Lookback: DefaultVelocityLookback, QuarantineFor: DefaultQuarantineFor, MinuteShare: DefaultMinuteShare,
		UnverifiedFloor: DefaultUnverifiedFloor, UnverifiedShare: DefaultUnverifiedShare,
		ColdPerHour: DefaultColdPerHour, ColdPerDay: DefaultColdPerDay, ColdBelow: DefaultColdBelow,
		ColdWarmConversion: DefaultColdWarmConversion, CarrierSplit: true, CarrierFloorShare: DefaultCarrierFloorShare, GrowthPerDay: DefaultGrowthPerDay}
}

// DefaultConversion is the conversion watch when the policy file names none.
func DefaultConversion() ConversionPolicy {
	return ConversionPolicy{Mode: ConversionBlock, MinRate: DefaultMinRate, MinSends: DefaultMinSends,
		BlockFor: DefaultBlockFor, Delay: DefaultConvDelay, Relative: DefaultRelative, HistoryMinSends: DefaultHistoryMin}
}

// LimitNames returns the names of the limit policies, sorted.
func (p *Policies) LimitNames() []string {
	names := make([]string, 0, len(p.Limits))
	for n := range p.Limits {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// FillDefaults completes what a policy file may leave out: the fallback modes
// (closed for OTP, open for limits) and, when the file names no limit policy,
// the "default" one.
func (p *Policies) FillDefaults() {
	if p.OTP.OnStoreError == "" {
		p.OTP.OnStoreError = limit.FallbackClosed
	}
	p.OTP.fillAbuseDefaults()
	if len(p.Limits) == 0 {
		p.Limits = DefaultPolicies().Limits
	}
	for name, l := range p.Limits {
		if l.OnStoreError == "" {
			l.OnStoreError = limit.FallbackOpen
		}
		if l.Mode == limit.ModeSync && l.SyncInterval == 0 {
			l.SyncInterval = limit.DefaultSyncInterval
		}
		p.Limits[name] = l
	}
}

// fillAbuseDefaults completes a conversion watch the file left empty.
func (o *OTPPolicy) fillAbuseDefaults() {
	if o.Conversion.Mode == "" {
		o.Conversion = DefaultConversion()
	}
	if o.PerPrefix.DigitsDropped == 0 {
		o.PerPrefix.DigitsDropped = DefaultDigitsDropped
	}
	v := &o.CountryVelocity
	if v.Mode == "" {
		*v = DefaultCountryVelocity()
	}
	if v.GrowthPerDay == 0 {
		v.GrowthPerDay = DefaultGrowthPerDay
	}
	if o.Trust == (TrustPolicy{}) {
		o.Trust = DefaultTrust()
	}
	if o.Risk.Mode == "" {
		o.Risk = DefaultRisk()
	}
	if o.Channels == nil {
		o.Channels = map[string]ChannelPolicy{}
	}
	for ch, c := range DefaultChannelPolicies() { // a channel the file leaves out
		if _, ok := o.Channels[ch]; !ok {
			o.Channels[ch] = c
		}
	}
}

// ChannelPolicy is one channel's entry of otp.channels: its own window of
// sends per number, counted beside per_phone (which counts every
// channel's), and its price, what one send takes from the spend budget
// (otp.budget counts SMS: an SMS's price is 1).
type ChannelPolicy struct {
	PerPhone Window // Limit 0: no window of its own
	Price    int64
}

// Defaults of otp.channels: WhatsApp costs about an SMS; a call costs
// several and is what toll fraud pumps, so fewer per number.
const (
	DefaultWhatsAppPerPhone = 3
	DefaultCallPerPhone     = 2
	DefaultCallPrice        = 5
)

// DefaultChannelPolicies are otp.channels when the policy file names
// none: sms price 1 (its window is per_phone); whatsapp 3 per number in
// 10 minutes, price 1; call 2 per number an hour, price 5.
func DefaultChannelPolicies() map[string]ChannelPolicy {
	return map[string]ChannelPolicy{
		ChannelSMS:      {Price: 1},
		ChannelWhatsApp: {PerPhone: Window{Limit: DefaultWhatsAppPerPhone, Window: 10 * time.Minute}, Price: 1},
		ChannelCall:     {PerPhone: Window{Limit: DefaultCallPerPhone, Window: time.Hour}, Price: DefaultCallPrice},
	}
}
