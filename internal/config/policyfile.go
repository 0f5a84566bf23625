package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// The policy file (OTPGUARD_CONFIG; README.md, "Policy file") is a format
// of the composition root, not of the domain: these types mirror
// guard.Policies field for field, carry the YAML names, and convert to and
// from it. The file is decoded over the defaults, so each type keeps the
// shape (struct, map, slice) of the field it mirrors: a key the file leaves
// out keeps its default exactly as it would in guard's own types.

// filePolicies is the whole policy file.
type filePolicies struct {
	OTP      fileOTPPolicy              `yaml:"otp"`
	Limits   map[string]fileLimitPolicy `yaml:"limits"`
	Services []fileService              `yaml:"services,omitempty"` // policyfile_services.go
}

// fileOTPPolicy is the file's otp: section (guard.OTPPolicy).
type fileOTPPolicy struct {
	CodeLength         int                    `yaml:"code_length"`
	CodeTTL            fileDuration           `yaml:"code_ttl"`
	MaxVerifyAttempts  int                    `yaml:"max_verify_attempts"`
	Cooldown           fileDuration           `yaml:"cooldown"`
	PerPhone           fileWindow             `yaml:"per_phone"`
	PerIP              fileWindow             `yaml:"per_ip"`
	DefaultRegion      string                 `yaml:"default_region,omitempty"`
	Message            string                 `yaml:"message"`
	Messages           map[string]string      `yaml:"messages,omitempty"` // locale -> text (guard/locale.go)
	Mode               limit.Mode             `yaml:"mode,omitempty"`     // exists to be refused: OTP limits are always exact
	OnStoreError       limit.FallbackMode     `yaml:"on_store_error"`
	LocalLimit         int64                  `yaml:"local_limit,omitempty"`
	AllowedCountries   []string               `yaml:"allowed_countries"`
	AllowedNumberTypes []string               `yaml:"allowed_number_types"`
	AllowHighRisk      []string               `yaml:"allow_high_risk"`
	PerPrefix          filePrefixWindow       `yaml:"per_prefix"`
	PrefixDepths       []filePrefixWindow     `yaml:"prefix_depths"`
	PerCountry         map[string]fileWindow  `yaml:"per_country"`
	CountryVelocity    fileVelocity           `yaml:"country_velocity"`
	Budget             fileBudget             `yaml:"budget"`
	Conversion         fileConversion         `yaml:"conversion"`
	SafeList           []string               `yaml:"safe_list"`
	Challenge          fileChallenge          `yaml:"challenge"`
	Trust              fileTrust              `yaml:"trust"`
	Risk               fileRisk               `yaml:"risk"`
	Channels           map[string]fileChannel `yaml:"channels"`
	FallbackChannel    string                 `yaml:"fallback_channel"`
}

// fileChannel is one channel of otp.channels (guard.ChannelPolicy).
type fileChannel struct {
	PerPhone fileWindow `yaml:"per_phone"`
	Price    int64      `yaml:"price"`
}

// fileChallenge is otp.challenge (guard.ChallengePolicy).
type fileChallenge struct {
	Type      guard.ChallengeType `yaml:"type"`
	MaxNumber int64               `yaml:"max_number"`
	Expires   fileDuration        `yaml:"expires"`
	Floor     int64               `yaml:"floor"`
	CutFor    fileDuration        `yaml:"cut_for"`
}

// fileLimitPolicy is one policy under limits: (limit.Policy).
type fileLimitPolicy struct {
	Algorithm       limit.Algorithm    `yaml:"algorithm"`
	Capacity        int64              `yaml:"capacity,omitempty"`
	RefillPerSecond float64            `yaml:"refill_per_second,omitempty"`
	Limit           int64              `yaml:"limit,omitempty"`
	Window          fileDuration       `yaml:"window,omitempty"`
	Shadow          bool               `yaml:"shadow"`
	OnStoreError    limit.FallbackMode `yaml:"on_store_error"`
	LocalLimit      int64              `yaml:"local_limit,omitempty"`
	Mode            limit.Mode         `yaml:"mode,omitempty"`
	SyncInterval    fileDuration       `yaml:"sync_interval,omitempty"`
	Exact           bool               `yaml:"exact,omitempty"`
}

// fileWindow is {limit, window} (guard.Window).
type fileWindow struct {
	Limit  int64        `yaml:"limit"`
	Window fileDuration `yaml:"window"`
}

// filePrefixWindow is otp.per_prefix (guard.PrefixWindow).
type filePrefixWindow struct {
	Limit         int64        `yaml:"limit"`
	Window        fileDuration `yaml:"window"`
	DigitsDropped int          `yaml:"digits_dropped"`
}

// fileVelocity is otp.country_velocity (guard.CountryVelocity).
type fileVelocity struct {
	Mode     guard.VelocityMode `yaml:"mode"`
	Floor    int64              `yaml:"floor"`
	Factor   float64            `yaml:"factor"`
	Lookback fileDuration       `yaml:"lookback"`
	// MinConversion is accepted and ignored, so that policy files that set
	// it still load: an hour's credit is its verified sends (docs/abuse.md).
	MinConversion float64          `yaml:"min_conversion,omitempty"`
	Expected      map[string]int64 `yaml:"expected"`
	QuarantineFor fileDuration     `yaml:"quarantine_for"`
	MinuteShare   float64          `yaml:"minute_share"`
	// UnverifiedFloor and UnverifiedShare: the unverified budget.
	UnverifiedFloor int64   `yaml:"unverified_floor"`
	UnverifiedShare float64 `yaml:"unverified_share"`
	// ColdPerHour, ColdPerDay and ColdBelow: the cold room.
	ColdPerHour int64 `yaml:"cold_per_hour"`
	ColdPerDay  int64 `yaml:"cold_per_day"`
	ColdBelow   int64 `yaml:"cold_below"`
	// ColdWarmConversion: left out is the default (0.8), 0 is off.
	ColdWarmConversion *float64 `yaml:"cold_warm_conversion,omitempty"`
	// CarrierSplit and CarrierFloorShare: the carriers split a country's room.
	CarrierSplit      bool    `yaml:"carrier_split"`
	CarrierFloorShare float64 `yaml:"carrier_floor_share"`
	// GrowthPerDay: the bounded pace; 0 or left out is the default.
	GrowthPerDay float64 `yaml:"growth_per_day,omitempty"`
}

// warmConversion is cold_warm_conversion, its default when left out.
func (v fileVelocity) warmConversion() float64 {
	if v.ColdWarmConversion == nil {
		return guard.DefaultColdWarmConversion
	}
	return *v.ColdWarmConversion
}

// fileTrust is otp.trust (guard.TrustPolicy). VerifiedWithin and HoldFor
// are pointers so that an explicit 0 (off) differs from leaving them out
// (90 days, 72 hours).
type fileTrust struct {
	VerifiedWithin *fileDuration `yaml:"verified_within"`
	Floor          int64         `yaml:"floor"`
	Factor         float64       `yaml:"factor"`
	HoldFor        *fileDuration `yaml:"hold_for,omitempty"`
}

// trust is otp.trust as the domain's policy; all left out: the zero policy,
// which FillDefaults completes.
func (t fileTrust) trust() guard.TrustPolicy {
	if t == (fileTrust{}) {
		return guard.TrustPolicy{}
	}
	p := guard.TrustPolicy{VerifiedWithin: guard.DefaultVerifiedWithin, Floor: t.Floor, Factor: t.Factor, HoldFor: guard.DefaultHoldFor}
	if t.VerifiedWithin != nil {
		p.VerifiedWithin = time.Duration(*t.VerifiedWithin)
	}
	if t.HoldFor != nil {
		p.HoldFor = time.Duration(*t.HoldFor)
	}
	if p.Floor == 0 {
		p.Floor = guard.DefaultTrustFloor
	}
	if p.Factor == 0 {
		p.Factor = guard.DefaultTrustFactor
	}
	return p
}

func toFileTrust(t guard.TrustPolicy) fileTrust {
	if t == (guard.TrustPolicy{}) {
		return fileTrust{}
	}
	d, h := fileDuration(t.VerifiedWithin), fileDuration(t.HoldFor)
	return fileTrust{VerifiedWithin: &d, Floor: t.Floor, Factor: t.Factor, HoldFor: &h}
}

// fileBudget is otp.budget (guard.Budget).
type fileBudget struct {
	PerHour int64 `yaml:"per_hour"`
	PerDay  int64 `yaml:"per_day"`
}

// fileConversion is otp.conversion (guard.ConversionPolicy).
type fileConversion struct {
	Mode     guard.ConversionMode `yaml:"mode"`
	MinRate  float64              `yaml:"min_rate"`
	MinSends int64                `yaml:"min_sends"`
	BlockFor fileDuration         `yaml:"block_for"`
	Delay    fileDuration         `yaml:"delay"`
	Relative float64              `yaml:"relative"`
	History  int64                `yaml:"history_min_sends"`
}

// fileDuration is a duration written as "30s" or "10m" in the policy file.
type fileDuration time.Duration

// UnmarshalYAML parses a Go duration string and names the line of a bad
// one, so that it can be found (yaml.v3 adds no position to an error a
// TextUnmarshaler returns).
func (d *fileDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 30s, 10m or 1h", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 30s, 10m, 1h)", n.Line, n.Value)
	}
	*d = fileDuration(v)
	return nil
}

// MarshalText writes d the way it is read.
func (d fileDuration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// decodePolicies reads a policy file over the defaults. Unknown fields are
// errors: a misspelt limit must not silently fall back to a default. A file
// that names limits replaces the default limit policy; FillDefaults then
// completes what the file left out.
func decodePolicies(b []byte) (guard.Policies, error) {
	p := guard.DefaultPolicies()
	if err := checkPolicyShape(b); err != nil {
		return p, err
	}
	p.Limits = nil
	f := policyFile(p)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return p, err
	}
	p = f.policies()
	p.FillDefaults()
	return p, nil
}

// encodePolicies writes p as a policy file: what `otpguard config check`
// prints.
func encodePolicies(w io.Writer, p guard.Policies) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	defer enc.Close()
	return enc.Encode(policyFile(p))
}

// policyFile is p in the file's format.
func policyFile(p guard.Policies) filePolicies {
	o := p.OTP
	return filePolicies{
		OTP: fileOTPPolicy{
			CodeLength:         o.CodeLength,
			CodeTTL:            fileDuration(o.CodeTTL),
			MaxVerifyAttempts:  o.MaxVerifyAttempts,
			Cooldown:           fileDuration(o.Cooldown),
			PerPhone:           toFileWindow(o.PerPhone),
			PerIP:              toFileWindow(o.PerIP),
			DefaultRegion:      o.DefaultRegion,
			Message:            o.Message,
			Messages:           convertMap(o.Messages, func(m string) string { return m }),
			Mode:               o.Mode,
			OnStoreError:       o.OnStoreError,
			LocalLimit:         o.LocalLimit,
			AllowedCountries:   slices.Clone(o.AllowedCountries),
			AllowedNumberTypes: slices.Clone(o.AllowedNumberTypes),
			AllowHighRisk:      slices.Clone(o.AllowHighRisk),
			PerPrefix:          toFilePrefix(o.PerPrefix),
			PrefixDepths:       convertSlice(o.PrefixDepths, toFilePrefix),
			PerCountry:         convertMap(o.PerCountry, toFileWindow),
			CountryVelocity: fileVelocity{Mode: o.CountryVelocity.Mode, Floor: o.CountryVelocity.Floor,
				Factor: o.CountryVelocity.Factor, Lookback: fileDuration(o.CountryVelocity.Lookback),
				Expected:      convertMap(o.CountryVelocity.Expected, func(n int64) int64 { return n }),
				QuarantineFor: fileDuration(o.CountryVelocity.QuarantineFor), MinuteShare: o.CountryVelocity.MinuteShare,
				UnverifiedFloor: o.CountryVelocity.UnverifiedFloor, UnverifiedShare: o.CountryVelocity.UnverifiedShare,
				ColdPerHour: o.CountryVelocity.ColdPerHour, ColdPerDay: o.CountryVelocity.ColdPerDay, ColdBelow: o.CountryVelocity.ColdBelow,
				CarrierSplit: o.CountryVelocity.CarrierSplit, CarrierFloorShare: o.CountryVelocity.CarrierFloorShare,
				GrowthPerDay: o.CountryVelocity.GrowthPerDay, ColdWarmConversion: &o.CountryVelocity.ColdWarmConversion},
			Budget: fileBudget{PerHour: o.Budget.PerHour, PerDay: o.Budget.PerDay},
			Conversion: fileConversion{Mode: o.Conversion.Mode, MinRate: o.Conversion.MinRate,
				MinSends: o.Conversion.MinSends, BlockFor: fileDuration(o.Conversion.BlockFor),
				Delay: fileDuration(o.Conversion.Delay), Relative: o.Conversion.Relative, History: o.Conversion.HistoryMinSends},
			SafeList: slices.Clone(o.SafeList),
			Challenge: fileChallenge{Type: o.Challenge.Type, MaxNumber: o.Challenge.MaxNumber,
				Expires: fileDuration(o.Challenge.Expires), Floor: o.Challenge.Floor, CutFor: fileDuration(o.Challenge.CutFor)},
			Trust: toFileTrust(o.Trust),
			Risk:  toFileRisk(o.Risk),
			Channels: convertMap(o.Channels, func(c guard.ChannelPolicy) fileChannel {
				return fileChannel{PerPhone: toFileWindow(c.PerPhone), Price: c.Price}
			}),
			FallbackChannel: o.FallbackChannel,
		},
		Services: toFileServices(p.Services),
		Limits: convertMap(p.Limits, func(l limit.Policy) fileLimitPolicy {
			return fileLimitPolicy{
				Algorithm: l.Algorithm, Capacity: l.Capacity, RefillPerSecond: l.RefillPerSecond,
				Limit: l.Limit, Window: fileDuration(l.Window),
				Shadow: l.Shadow, OnStoreError: l.OnStoreError, LocalLimit: l.LocalLimit,
				Mode: l.Mode, SyncInterval: fileDuration(l.SyncInterval), Exact: l.Exact,
			}
		}),
	}
}

// policies is the file as the domain's policies.
func (f filePolicies) policies() guard.Policies {
	o := f.OTP
	return guard.Policies{
		OTP: guard.OTPPolicy{
			CodeLength:         o.CodeLength,
			CodeTTL:            time.Duration(o.CodeTTL),
			MaxVerifyAttempts:  o.MaxVerifyAttempts,
			Cooldown:           time.Duration(o.Cooldown),
			PerPhone:           o.PerPhone.window(),
			PerIP:              o.PerIP.window(),
			DefaultRegion:      o.DefaultRegion,
			Message:            o.Message,
			Messages:           convertMap(o.Messages, func(m string) string { return m }),
			Mode:               o.Mode,
			OnStoreError:       o.OnStoreError,
			LocalLimit:         o.LocalLimit,
			AllowedCountries:   slices.Clone(o.AllowedCountries),
			AllowedNumberTypes: slices.Clone(o.AllowedNumberTypes),
			AllowHighRisk:      slices.Clone(o.AllowHighRisk),
			PerPrefix:          o.PerPrefix.prefixWindow(),
			PrefixDepths:       convertSlice(o.PrefixDepths, filePrefixWindow.prefixWindow),
			PerCountry:         convertMap(o.PerCountry, fileWindow.window),
			CountryVelocity: guard.CountryVelocity{Mode: o.CountryVelocity.Mode, Floor: o.CountryVelocity.Floor,
				Factor: o.CountryVelocity.Factor, Lookback: time.Duration(o.CountryVelocity.Lookback),
				Expected:      convertMap(o.CountryVelocity.Expected, func(n int64) int64 { return n }),
				QuarantineFor: time.Duration(o.CountryVelocity.QuarantineFor), MinuteShare: o.CountryVelocity.MinuteShare,
				UnverifiedFloor: o.CountryVelocity.UnverifiedFloor, UnverifiedShare: o.CountryVelocity.UnverifiedShare,
				ColdPerHour: o.CountryVelocity.ColdPerHour, ColdPerDay: o.CountryVelocity.ColdPerDay, ColdBelow: o.CountryVelocity.ColdBelow,
				CarrierSplit: o.CountryVelocity.CarrierSplit, CarrierFloorShare: o.CountryVelocity.CarrierFloorShare,
				GrowthPerDay: o.CountryVelocity.GrowthPerDay, ColdWarmConversion: o.CountryVelocity.warmConversion()},
			Budget: guard.Budget{PerHour: o.Budget.PerHour, PerDay: o.Budget.PerDay},
			Conversion: guard.ConversionPolicy{Mode: o.Conversion.Mode, MinRate: o.Conversion.MinRate,
				MinSends: o.Conversion.MinSends, BlockFor: time.Duration(o.Conversion.BlockFor),
				Delay: time.Duration(o.Conversion.Delay), Relative: o.Conversion.Relative, HistoryMinSends: o.Conversion.History},
			SafeList: slices.Clone(o.SafeList),
			Challenge: guard.ChallengePolicy{Type: o.Challenge.Type, MaxNumber: o.Challenge.MaxNumber,
				Expires: time.Duration(o.Challenge.Expires), Floor: o.Challenge.Floor, CutFor: time.Duration(o.Challenge.CutFor)},
			Trust: o.Trust.trust(),
			Risk:  o.Risk.risk(),
			Channels: convertMap(o.Channels, func(c fileChannel) guard.ChannelPolicy {
				return guard.ChannelPolicy{PerPhone: c.PerPhone.window(), Price: c.Price}
			}),
			FallbackChannel: o.FallbackChannel,
		},
		Services: servicesOf(f.Services),
		Limits: convertMap(f.Limits, func(l fileLimitPolicy) limit.Policy {
			return limit.Policy{
				Algorithm: l.Algorithm, Capacity: l.Capacity, RefillPerSecond: l.RefillPerSecond,
				Limit: l.Limit, Window: time.Duration(l.Window),
				Shadow: l.Shadow, OnStoreError: l.OnStoreError, LocalLimit: l.LocalLimit,
				Mode: l.Mode, SyncInterval: time.Duration(l.SyncInterval), Exact: l.Exact,
			}
		}),
	}
}

func toFileWindow(w guard.Window) fileWindow {
	return fileWindow{Limit: w.Limit, Window: fileDuration(w.Window)}
}

func (w fileWindow) window() guard.Window {
	return guard.Window{Limit: w.Limit, Window: time.Duration(w.Window)}
}

func toFilePrefix(p guard.PrefixWindow) filePrefixWindow {
	return filePrefixWindow{Limit: p.Limit, Window: fileDuration(p.Window), DigitsDropped: p.DigitsDropped}
}

func (p filePrefixWindow) prefixWindow() guard.PrefixWindow {
	return guard.PrefixWindow{Limit: p.Limit, Window: time.Duration(p.Window), DigitsDropped: p.DigitsDropped}
}

// convertSlice converts every element of s; nil stays nil and empty stays
// empty, as the file said.
func convertSlice[A, B any](s []A, convert func(A) B) []B {
	if s == nil {
		return nil
	}
	out := make([]B, len(s))
	for i, v := range s {
		out[i] = convert(v)
	}
	return out
}

// convertMap converts every value of m; nil stays nil and empty stays
// empty, as the file said.
func convertMap[A, B any](m map[string]A, convert func(A) B) map[string]B {
	if m == nil {
		return nil
	}
	out := make(map[string]B, len(m))
	for k, v := range m {
		out[k] = convert(v)
	}
	return out
}
