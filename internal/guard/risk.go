package guard

import (
	"context"
	"slices"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The network's risk score (docs/abuse.md, "The risk score"): Twilio
// Lookup v2's SMS pumping risk for a number, asked only where a send
// would otherwise be challenged or refused, or takes a place in a room
// whose places are contested (contested.go), since each lookup costs
// money and a round trip.
//
// A score at or above refuse_above (or a number the network blocks)
// refuses the send (403 high_risk_number); a score at or below
// allow_below lets it through in the vouched tier, a per-country hourly
// cap of its own; anything between, or no answer (the lookup failed, was
// slow, the budget is spent, the rule is off), leaves the send what it
// gets without a score: the challenge. Answers are cached per number
// under its HMAC with the country's hash tag, so that the velocity script
// reads a cached score in the send's own round trip (riskstep.go).

// RiskAnswer is what the network says of one number.
type RiskAnswer struct {
	// Score is the SMS pumping risk score, 0 (low) to 100 (high).
	Score int
	// CarrierRisk is the carrier's risk category ("low", "mild", "high");
	// "" when not given.
	CarrierRisk string
	// Blocked: the network blocks the number (Lookup's number_blocked).
	Blocked bool
	// LineType is the live line type ("mobile", "nonFixedVoip", "premium"...,
	// Lookup's line_type_intelligence.type); "" when not given. It
	// overrides the static number type of libphonenumber's metadata.
	LineType string
	// At is when the answer was fetched (a cached answer keeps its age).
	At time.Time
}

// RiskLookup asks the network for a number's risk (sms: the Lookup v2
// client; the simulator: a fake answering from the scenario).
type RiskLookup interface {
	// LookupRisk asks for e164's risk. An error (or ctx's deadline) means
	// no answer: the send gets what it would without a score.
	LookupRisk(ctx context.Context, e164 string) (RiskAnswer, error)
}

// RiskMode turns otp.risk on or off.
type RiskMode string

// The modes of otp.risk.
const (
	RiskOff RiskMode = "off"
	RiskOn  RiskMode = "on"
)

// RiskPolicy is otp.risk.
type RiskPolicy struct {
	Mode RiskMode
	// RefuseAbove: a score at or above it refuses; AllowBelow: a score at
	// or below it lets the send through in the vouched tier.
	RefuseAbove int
	AllowBelow  int
	// How long an answer is cached (and trusted) by its class: high,
	// low, and between.
	HighFor time.Duration
	LowFor  time.Duration
	MidFor  time.Duration
	// Countries (ISO codes) opt in to a lookup of every untrusted send
	// before its limits, not only of those about to be challenged.
	Countries []string
	// VouchedFloor is the vouched tier's cap per country and hour.
	VouchedFloor int64
	// PerHour and PerDay bound the lookups of the deployment (fixed
	// windows from their first lookup).
	PerHour int64
	PerDay  int64
	// Timeout bounds one lookup.
	Timeout time.Duration
}

// Defaults of otp.risk.
const (
	DefaultRiskRefuseAbove  = 75
	DefaultRiskAllowBelow   = 25
	DefaultRiskHighFor      = 24 * time.Hour
	DefaultRiskLowFor       = 720 * time.Hour
	DefaultRiskMidFor       = 720 * time.Hour
	DefaultRiskVouchedFloor = 50
	DefaultRiskPerHour      = 1000
	DefaultRiskPerDay       = 10000
	DefaultRiskTimeout      = 1500 * time.Millisecond
)

// DefaultRisk is otp.risk when the policy file says nothing: off, with
// the documented thresholds, cache times and budgets ready for mode: on.
func DefaultRisk() RiskPolicy {
	return RiskPolicy{Mode: RiskOff, RefuseAbove: DefaultRiskRefuseAbove, AllowBelow: DefaultRiskAllowBelow,
		HighFor: DefaultRiskHighFor, LowFor: DefaultRiskLowFor, MidFor: DefaultRiskMidFor,
		VouchedFloor: DefaultRiskVouchedFloor, PerHour: DefaultRiskPerHour, PerDay: DefaultRiskPerDay,
		Timeout: DefaultRiskTimeout}
}

// validateRisk checks otp.risk.
func validateRisk(r RiskPolicy, bad func(string, string, ...any)) {
	switch r.Mode {
	case RiskOff, RiskOn:
	default:
		bad("otp.risk.mode", "must be off or on, got %q", r.Mode)
	}
	if r.AllowBelow < 0 || r.RefuseAbove > 100 || r.AllowBelow >= r.RefuseAbove {
		bad("otp.risk", "need 0 <= allow_below < refuse_above <= 100, got allow_below %d, refuse_above %d", r.AllowBelow, r.RefuseAbove)
	}
	for field, d := range map[string]time.Duration{"high_for": r.HighFor, "low_for": r.LowFor, "mid_for": r.MidFor} {
		if d < time.Minute || d > maxWindow {
			bad("otp.risk."+field, "must be between 1m and %s, got %s", maxWindow, d)
		}
	}
	for _, c := range r.Countries {
		validateRegion("otp.risk.countries", c, bad)
	}
	if r.VouchedFloor < 1 || r.VouchedFloor > maxLimit {
		bad("otp.risk.vouched_floor", "must be between 1 and %d, got %d", maxLimit, r.VouchedFloor)
	}
	if r.PerHour < 1 || r.PerHour > maxLimit {
		bad("otp.risk.per_hour", "must be between 1 and %d, got %d", maxLimit, r.PerHour)
	}
	if r.PerDay < r.PerHour || r.PerDay > maxLimit {
		bad("otp.risk.per_day", "must be between per_hour (%d) and %d, got %d", r.PerHour, maxLimit, r.PerDay)
	}
	if r.Timeout < 100*time.Millisecond || r.Timeout > 10*time.Second {
		bad("otp.risk.timeout", "must be between 100ms and 10s, got %s", r.Timeout)
	}
}

// Risks keeps the cached answers (each call one round trip).
type Risks interface {
	// CachedRisk reads the answer cached under k, and whether mark (a
	// trust mark of the same hash tag; ID "" for none) is set.
	CachedRisk(ctx context.Context, k, mark limit.Key) (RiskCached, error)
	// CacheRisk caches a under k for ttl.
	CacheRisk(ctx context.Context, k limit.Key, a RiskAnswer, ttl time.Duration) error
	// ClearRisk deletes the answer cached under k; false: there was none.
	ClearRisk(ctx context.Context, k limit.Key) (bool, error)
}

// RiskCached is a read of a number's cached answer: by the velocity
// script with a send's count (VolumeTake.Risk), or on its own (Risks).
type RiskCached struct {
	Read    bool // the read was made (false: nothing was asked or answered)
	Found   bool // an answer is cached
	Trusted bool // the number's trust mark is set (Risks.CachedRisk only)
	Answer  RiskAnswer
}

// RiskLineTypes are Lookup's line types, in the order of their codes in
// the cache (RiskLineTypeCode): a cached answer keeps its line type as a
// number, so that the velocity script's reply stays integers. New types
// go at the end; an unknown one is cached as 0 ("").
var RiskLineTypes = []string{"", "mobile", "landline", "fixedVoip", "nonFixedVoip", "personal",
	"tollFree", "premium", "sharedCost", "uan", "voicemail", "pager", "unknown"}

// RiskLineTypeCode is t's code in the cache (0 for "" or a type not in
// RiskLineTypes).
func RiskLineTypeCode(t string) int64 {
	return int64(max(0, slices.Index(RiskLineTypes, t)))
}

// RiskLineType is the line type of code c.
func RiskLineType(c int64) string {
	if c < 0 || c >= int64(len(RiskLineTypes)) {
		return ""
	}
	return RiskLineTypes[c]
}

// RiskHooks tell metrics what the risk rule did. Nil fields are skipped.
type RiskHooks struct {
	// Lookup is told of every lookup asked or not asked: result is high,
	// low, mid, error or over_budget; d is the call's time (0 when none
	// was made).
	Lookup func(result string, d time.Duration)
}

// clear deletes phone's cached answer (an operator's word), recorded in
// the audit trail with the country only.
func (s *risk) clear(ctx context.Context, phone Phone, actor string) (bool, error) {
	if s.risks == nil {
		return false, nil
	}
	ok, err := s.risks.ClearRisk(ctx, riskKey(s.hmacKey, phone))
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "risk: clearing a score failed", "err", err)
		return false, limit.StoreError(err)
	}
	outcome := "cleared"
	if !ok {
		outcome = "none"
	}
	s.events.Record(Event{At: s.now(), Action: ActionRiskClear, Outcome: outcome, Country: phone.Region, Actor: actor,
		Detail: "number " + MaskPhone(phone.E164), TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
	return ok, nil
}
