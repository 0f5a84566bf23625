package guard

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Duration is time.Duration.
//
// Deprecated: write time.Duration. The alias stays only while code being
// moved out of guard (opsdesk.go) still names it.
type Duration = time.Duration

// Window is a fixed-window budget: at most Limit events per Window, the window
// starting at the first event.
type Window struct {
	Limit  int64
	Window time.Duration
}

// FailMode says what a policy does when the shared store cannot answer.
type FailMode string

// The fail modes of a policy (see the README, "When Redis is down").
const (
	FailClosed FailMode = "closed" // refuse with 503
	FailLocal  FailMode = "local"  // a strict per-instance limit (local_limit)
	FailOpen   FailMode = "open"   // allow through the split limit: limit / instances
)

// Algorithm names how a limit policy counts.
type Algorithm string

// The algorithms of /limits/check.
const (
	TokenBucket Algorithm = "token_bucket"
	FixedWindow Algorithm = "fixed_window"
)

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
	// Mode exists to be refused: OTP limits are always exact.
	Mode         Mode
	OnStoreError FailMode
	// LocalLimit is the per-instance send limit per number and window
	// when OnStoreError is "local".
	LocalLimit int64

	// The abuse defences (pumping.go, conversion.go; README.md, "Abuse defences").
	// AllowedCountries (ISO codes) limits where codes go; empty: anywhere.
	AllowedCountries []string
	// AllowedNumberTypes (libphonenumber's types: mobile, fixed_line,
	// fixed_line_or_mobile, toll_free, premium_rate, ...); empty: any.
	AllowedNumberTypes []string
	PerPrefix          PrefixWindow
	PerCountry         map[string]Window // ISO code or "*" -> budget
	Budget             Budget
	Conversion         ConversionPolicy
	SafeList           []string // numbers or prefixes: no velocity or conversion rules
}

// LimitPolicy is one named policy of /limits/check.
type LimitPolicy struct {
	Algorithm Algorithm
	// token_bucket
	Capacity        int64
	RefillPerSecond float64
	// fixed_window
	Limit  int64
	Window time.Duration

	Shadow       bool
	OnStoreError FailMode
	LocalLimit   int64

	// Mode "sync" counts locally and syncs every SyncInterval (hot keys);
	// "exact" (the default) asks Redis on every check.
	Mode         Mode
	SyncInterval time.Duration
	// Exact forbids sync mode on this policy, as a guard against a later edit.
	Exact bool
}

// Mode says where a limit policy's decisions are taken.
type Mode string

// The modes of a limit policy.
const (
	ModeExact Mode = "exact" // every check is one atomic step in Redis
	ModeSync  Mode = "sync"  // local counters with periodic sync
)

// DefaultSyncInterval is a sync-mode policy's interval when it names none.
const DefaultSyncInterval = time.Second

// Max is the most a policy lets through at once: the bucket's capacity or
// the window's limit.
func (p LimitPolicy) Max() int64 {
	if p.Algorithm == TokenBucket {
		return p.Capacity
	}
	return p.Limit
}

// Policies is everything the policy file configures.
type Policies struct {
	OTP    OTPPolicy
	Limits map[string]LimitPolicy
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
			Message:           "Your verification code is {code}",
			OnStoreError:      FailClosed,
			// The abuse defences (README.md, "Abuse defences").
			AllowedNumberTypes: DefaultNumberTypes(),
			PerPrefix:          DefaultPerPrefix(),
			Conversion:         DefaultConversion(),
		},
		Limits: map[string]LimitPolicy{
			"default": {Algorithm: TokenBucket, Capacity: 50, RefillPerSecond: 5, OnStoreError: FailOpen},
		},
	}
}

// Bounds that keep policies sane: a typo such as "window: 10h0000m" should
// fail at start-up, not lock numbers out for a year.
const (
	maxLimit      = 1_000_000_000
	maxWindow     = 31 * 24 * time.Hour
	maxRefill     = 1_000_000
	maxCodeTTL    = 10 * time.Minute
	minCodeTTL    = 30 * time.Second
	maxAttempts   = 20
	maxCooldown   = time.Hour
	maxPolicyName = 64
)

var policyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Validate checks every policy and returns all problems at once, each naming
// its field, e.g. `limits.api.capacity: must be between 1 and 1000000000`.
func (p *Policies) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	o := p.OTP
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
	if o.DefaultRegion != "" && !regexp.MustCompile(`^[A-Za-z]{2}$`).MatchString(o.DefaultRegion) {
		bad("otp.default_region", "must be an ISO 3166-1 alpha-2 code such as IN, got %q", o.DefaultRegion)
	}
	if !strings.Contains(o.Message, "{code}") {
		bad("otp.message", "must contain {code}")
	} else if len(o.Message) > 300 {
		bad("otp.message", "must be at most 300 characters")
	}
	validateFailMode("otp", o.OnStoreError, o.LocalLimit, bad)
	if o.Mode != "" && o.Mode != ModeExact {
		bad("otp.mode", "OTP limits are always exact: sync mode would let codes through past the limit")
	}
	validateAbuse(o, bad)

	for _, name := range p.LimitNames() {
		l := p.Limits[name]
		field := "limits." + name
		if len(name) > maxPolicyName || !policyName.MatchString(name) {
			bad(field, "policy names are lower-case letters, digits, _ and -, at most %d characters", maxPolicyName)
		}
		switch l.Algorithm {
		case TokenBucket:
			if l.Capacity < 1 || l.Capacity > maxLimit {
				bad(field+".capacity", "must be between 1 and %d, got %d", maxLimit, l.Capacity)
			}
			if !(l.RefillPerSecond > 0) || l.RefillPerSecond > maxRefill || math.IsInf(l.RefillPerSecond, 0) {
				bad(field+".refill_per_second", "must be above 0 and at most %d, got %v", maxRefill, l.RefillPerSecond)
			} else if full := time.Duration(float64(l.Capacity) / l.RefillPerSecond * float64(time.Second)); full > maxWindow {
				bad(field, "an empty bucket takes %s to refill; at most %s", full.Round(time.Second), maxWindow)
			}
			if l.Limit != 0 || l.Window != 0 {
				bad(field, "limit and window belong to fixed_window; a token_bucket has capacity and refill_per_second")
			}
		case FixedWindow:
			validateWindow(field, Window{Limit: l.Limit, Window: l.Window}, bad)
			if l.Capacity != 0 || l.RefillPerSecond != 0 {
				bad(field, "capacity and refill_per_second belong to token_bucket; a fixed_window has limit and window")
			}
		default:
			bad(field+".algorithm", "must be token_bucket or fixed_window, got %q", l.Algorithm)
		}
		validateFailMode(field, l.OnStoreError, l.LocalLimit, bad)
		switch l.Mode {
		case "", ModeExact:
			if l.SyncInterval != 0 {
				bad(field+".sync_interval", "only applies with mode: sync")
			}
		case ModeSync:
			if l.Exact {
				bad(field+".mode", "sync mode is refused on a policy marked exact: true")
			}
			if l.SyncInterval < 10*time.Millisecond || l.SyncInterval > time.Minute {
				bad(field+".sync_interval", "must be between 10ms and 1m, got %s", l.SyncInterval)
			}
		default:
			bad(field+".mode", "must be exact or sync, got %q", l.Mode)
		}
	}
	return errors.Join(errs...)
}

func validateWindow(field string, w Window, bad func(string, string, ...any)) {
	if w.Limit < 1 || w.Limit > maxLimit {
		bad(field+".limit", "must be between 1 and %d, got %d", maxLimit, w.Limit)
	}
	if w.Window < time.Second || w.Window > maxWindow {
		bad(field+".window", "must be between 1s and %s, got %s", maxWindow, w.Window)
	} else if w.Window%time.Millisecond != 0 {
		bad(field+".window", "must be a whole number of milliseconds")
	}
}

func validateFailMode(field string, m FailMode, localLimit int64, bad func(string, string, ...any)) {
	switch m {
	case FailClosed, FailOpen:
		if localLimit != 0 {
			bad(field+".local_limit", "only applies with on_store_error: local")
		}
	case FailLocal:
		if localLimit < 1 || localLimit > maxLimit {
			bad(field+".local_limit", "must be set (1 to %d) with on_store_error: local", maxLimit)
		}
	default:
		bad(field+".on_store_error", "must be closed, local or open, got %q", m)
	}
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

// FillDefaults completes what a policy file may leave out: the fail modes
// (closed for OTP, open for limits) and, when the file names no limit policy,
// the "default" one.
func (p *Policies) FillDefaults() {
	if p.OTP.OnStoreError == "" {
		p.OTP.OnStoreError = FailClosed
	}
	p.OTP.fillAbuseDefaults()
	if len(p.Limits) == 0 {
		p.Limits = DefaultPolicies().Limits
	}
	for name, l := range p.Limits {
		if l.OnStoreError == "" {
			l.OnStoreError = FailOpen
		}
		if l.Mode == ModeSync && l.SyncInterval == 0 {
			l.SyncInterval = DefaultSyncInterval
		}
		p.Limits[name] = l
	}
}
