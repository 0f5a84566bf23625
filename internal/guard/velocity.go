package guard

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The country velocity rule (README.md, "Abuse defences"; docs/abuse.md).
// A pumping campaign sends to one country far more than that country ever
// sent, so each country's sends in the hour under way are held to
// max(floor, factor x baseline): the baseline is the country's busiest
// credited hour over the lookback, the floor what a country without
// history gets. Hours are buckets of the service's clock (Now), so that a
// test can drive days of history; counts live in Redis, shared and exact.
//
// An hour's credit is its verified sends (verifies, at most its sends):
// codes nobody verifies teach the baseline nothing, and a campaign that
// verifies a share c of its codes earns factor x c of its sends, less
// than it sent while c < 1/factor (a third), so it cannot raise its own
// limit by running long while real users (85 % verified) keep theirs. The
// same hours give the country's normal conversion, which the conversion
// watch judges the hour under way by (NormalConversion). And a country the conversion watch
// finds unverified (block mode) is quarantined for quarantine_for: its floor
// drops to a tenth, while whatever its verified history earned stays.

// VolumeTake asks the store to count one send to a country in an hour.
type VolumeTake struct {
	Key        limit.Key // the country's counters
	Quarantine limit.Key // set while the country is quarantined; same hash tag as Key
	Now        time.Time // the service's clock
	Hour       int64     // the hour bucket: unix seconds / 3600 of Now
	Lookback   int64     // hours before Hour the baseline looks at
	Floor      int64
	QFloor     int64 // the floor while quarantined
	Factor     float64
	// HistoryMinSends is how many sends the lookback must hold for the
	// country's normal conversion to be known (conversion.history_min_sends).
	HistoryMinSends int64
	// MinuteShare (0: off) is the share of the hour's limit one minute of
	// the clock may take (at least the floor).
	MinuteShare float64
	// Solved (nil: the velocity rule) makes this the solved tier's cap
	// (challenge.go): the limit is max(Floor, the baseline of Solved.Base),
	// a tenth of it while Quarantine (the cut) holds, and the solution's
	// key is taken once in the same step.
	Solved *SolvedUse

	// The trusted tier (trust.go). Trusted: the send is known trusted and
	// counts in TrustedKey against max(TFloor, TFactor x its baseline),
	// no quarantine or minute share. Mark (ID not empty): the number's
	// trust mark, same hash tag as Key, for the store to read: when it is
	// set the send counts as trusted. NewOff: an untrusted send counts
	// nothing (the velocity rule is off; only the trusted tier is kept).
	Trusted    bool
	Mark       limit.Key
	TrustedKey limit.Key
	TFloor     int64
	TFactor    float64
	NewOff     bool

	// Unverified is the unverified budget of an untrusted send (unverified.go);
	// its zero value is off.
	Unverified UnverifiedTake
	// Carrier is the send's carrier's share of the country's room, for an
	// untrusted send (carriershare.go); its zero value is off.
	Carrier CarrierTake

	// Risk (ID not empty): the number's cached risk answer, the
	// country's hash tag, for the store to read with the count and answer
	// in VolumeResult.Risk (riskstep.go) where it can: on Redis Cluster
	// not with a named service's room (another slot), whose refusal then
	// reads the cache on its own. Vouched: the count is the vouched
	// tier's cap (its refusal is the tier's, not the country's).
	Risk    limit.Key
	Vouched bool
	// GrowthPerDay (0: off) is the bounded pace of the hash the send
	// counts in, its tier's (pace.go).
	GrowthPerDay float64
	// WarmConversion (0: off) is the share of the country's day-old new
	// numbers that must have verified, over at least HistoryMinSends
	// sends, for those hours to warm it (coldroom.go).
	WarmConversion float64
}

// VolumeResult is the store's answer to a VolumeTake.
type VolumeResult struct {
	Allowed     bool
	Count       int64 // sends counted in the hour (this one included when allowed)
	Limit       int64 // max(floor, factor x baseline) for the hour
	Baseline    int64 // the busiest credited hour of the lookback
	Quarantined bool
	// MinuteLimit is the minute's cap when the share applies; refused with
	// Count < Limit means the minute's cap refused.
	MinuteLimit int64
	// Reused: the solved tier's solution was used already (not counted).
	Reused bool
	// Trusted: the send counted (or was refused) in the trusted tier.
	Trusted bool
	// Unverified is the unverified budget that refused the send (0: it
	// did not).
	Unverified int64
	// Carrier: the carrier's share refused the send (carriershare.go);
	// Count, Limit and Unverified are then the carrier's.
	Carrier bool
	// Warmth is the country's verified history at least a day old, for
	// an untrusted send of the velocity rule (coldroom.go): its busiest
	// credited hour in either tier that ended a day or more ago, or the
	// numbers an operator imported over the lookback, the larger.
	Warmth int64
	// Contested: the velocity rule refused an untrusted send of the room
	// in this hour or the last (contested.go).
	Contested bool
	// Risk is the number's cached risk answer, when VolumeTake.Risk
	// asked for it and the store read it.
	Risk RiskCached
	// Vouched: the vouched tier's place the take tried first
	// (SolvedUse.Vouched) counted the send; Count and Limit are the
	// tier's, and the solved cap counted nothing.
	Vouched bool
	// Fallback: the store did not answer for the country's keys (their
	// Redis Cluster master is dead) and this instance decided from memory,
	// by the split limit; nothing was counted in the store, so nothing is
	// refunded there.
	Fallback bool
}

// Volumes keeps the hourly counts of the country velocity rule. Each call
// is one atomic step in the store.
//
// A Counter that is also a SendCounter takes the rule's count in the same
// round trip as the send's limits; Volumes then only refunds, credits and
// quarantines.
type Volumes interface {
	// TakeVolume counts one send if the hour stays within its limit.
	TakeVolume(ctx context.Context, t VolumeTake) (VolumeResult, error)
	// RefundVolume gives back a send TakeVolume counted at (its hour and
	// minute) under k, and under its carrier's counts (ID empty: none).
	RefundVolume(ctx context.Context, k, carrier limit.Key, at time.Time) error
	// CountVerified counts one verified code in hour: the credit of the
	// hour, in k and its carrier's counts (ID empty: none) in one step.
	CountVerified(ctx context.Context, k, carrier limit.Key, hour int64, ttl time.Duration) error
	// Quarantine records that the country is quarantined until until (the
	// service's clock); the record expires ttl after it is made.
	Quarantine(ctx context.Context, k limit.Key, until time.Time, ttl time.Duration) error
}

// Normals reads a country's normal conversion, which the velocity rule
// keeps from the same verified hours as its baseline.
type Normals interface {
	// NormalConversion is the country's verified sends / sends over the
	// lookback before hour, as the velocity rule computed it in hour;
	// known is false without enough history.
	NormalConversion(ctx context.Context, k limit.Key, hour int64) (rate float64, known bool, err error)
}

// velocityTTL is how long a country's counters outlive their last write:
// the lookback and one hour more, so the oldest hour is still there when
// the baseline reads it.
func (v CountryVelocity) ttl() time.Duration { return v.Lookback + 2*time.Hour }

// A country's velocity keys are named by its room's ID (room.go): its
// region, in its service's room.

func velocityKey(room string) limit.Key { return limit.Key{Space: "otp:vel", ID: room, Name: "h"} }

func quarantineKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "quarantine"}
}

// trustedTierKey is the trusted tier's hourly counters of a country:
// the velocity rule's layout, its own key.
func trustedTierKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "t"}
}

func solvedKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "solved"}
}

func solvedCutKey(room string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "solvedcut"}
}

func solutionKey(room, id string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: room, Name: "used:" + id}
}

// hour is the hour bucket of t.
func hour(t time.Time) int64 { return t.Unix() / 3600 }

// velocity is the country velocity rule of an OTP service: its counts,
// its refusals and their alerts, its credit and quarantines.
type velocity struct {
	policy CountryVelocity
	// historyMinSends is conversion.history_min_sends.
	historyMinSends int64
	onStoreError    limit.FallbackMode
	safe            safeList
	volumes         Volumes // nil: no country velocity rule
	conv            Conversions
	hooks           AbuseHooks
	audit           *audit
	// The tiers a send's count may be in, and the refusals of their caps.
	challenge  ChallengePolicy
	challenges *challenges
	trust      *trust
	unverified *unverifiedBudget
	solved     *solvedCap
	log        *slog.Logger
	now        func() time.Time

	mu sync.Mutex
	// noted is, per country, the end of the velocity block this instance
	// last noted in the block index (refused).
	noted map[string]time.Time
}

// on reports whether the rule applies to phone.
func (s *velocity) on(safe bool) bool {
	return s.volumes != nil && s.policy.Mode == VelocityEnforce && !safe
}

// floor is the country's floor: the larger of the policy's floor
// and the volume declared for it.
func (v CountryVelocity) floor(region string) int64 {
	return max(v.Floor, v.Expected[region])
}

// take is the velocity rule's count of one send to phone's country
// in the hour under way.
func (s *velocity) take(phone Phone) VolumeTake {
	v := s.policy
	r, id := region(phone), phone.in(region(phone))
	now := s.now()
	fl := v.floor(r)
	return VolumeTake{Key: velocityKey(id), Quarantine: quarantineKey(id), Now: now, Hour: hour(now),
		Lookback: int64(v.Lookback / time.Hour), Floor: fl, QFloor: max(1, fl/10),
		Factor: v.Factor, HistoryMinSends: s.historyMinSends, MinuteShare: v.MinuteShare,
		Unverified: s.unverifiedTake(), GrowthPerDay: v.GrowthPerDay, WarmConversion: v.ColdWarmConversion}
}

// volumeFor is the count of a send of tier in its country's hour: the
// solved cap's for a solved send (sol), else the velocity rule's unless
// the number is safe-listed (safe) or trusted, completed with the trusted
// tier (trustedTake), and with the carrier's share of the country's room
// (carriershare.go). Nil when the send counts no volume.
func (s *velocity) volumeFor(phone Phone, tier Tier, sol *Solution, safe bool) *VolumeTake {
	var vol *VolumeTake
	if tier == TierSolved && sol != nil {
		vol = s.solvedTake(phone, sol)
	} else {
		if s.on(safe) && tier != TierTrusted {
			v := s.take(phone)
			vol = &v
		}
		vol = s.trustedTake(phone, tier, vol)
	}
	return s.withCarrier(phone, vol)
}

// trustedTake completes the volume count of a send of tier: the trusted
// tier's counters and cap, and the mark for the script to read when the
// tier is not known yet. Nil when the send counts no volume.
func (s *velocity) trustedTake(phone Phone, tier Tier, vol *VolumeTake) *VolumeTake {
	if s.volumes == nil || s.safe.has(phone.E164) {
		return vol
	}
	if vol == nil {
		if tier != TierTrusted && !s.trust.on() {
			return nil
		}
		v := s.take(phone)
		v.NewOff = true // the velocity rule is off: only the trusted tier counts
		vol = &v
	}
	tp := s.trust.policy
	vol.Trusted = tier == TierTrusted
	vol.TrustedKey = trustedTierKey(phone.in(region(phone)))
	vol.TFloor, vol.TFactor = max(1, tp.Floor), max(1, tp.Factor)
	if !vol.Trusted && s.trust.on() {
		vol.Mark = trustMarkKey(s.trust.hmacKey, phone)
	}
	return vol
}

// solvedTake is the solved cap's count of one send: the velocity rule's
// mechanism on the solved tier's own counts, the solution's single-use key
// taken in the same atomic step.
func (s *velocity) solvedTake(phone Phone, sol *Solution) *VolumeTake {
	t := solvedCapTake(s.policy, s.challenge, s.historyMinSends, s.unverifiedTake(), region(phone), phone.in(region(phone)), s.now())
	t.Solved.Used, t.Solved.TTL = solutionKey(phone.in(region(phone)), sol.ID), max(time.Second, sol.Expires.Sub(t.Now))
	return &t
}

// solvedCapTake is the solved cap's count in region r's hour at now, in
// its room id (room.go),
// without its solution: the take of a send after a solved challenge
// (velocity.solvedTake) and the one the ops desk reads the cap in force
// by (SolvedCapTake, solved.go), so that the two cannot tell two caps. Its floor is
// the challenge's (otp.challenge.floor), else the country's velocity
// floor; the cap is max(floor, the country's baseline), a tenth while
// cut, each carrier's its share (carriershare.go).
func solvedCapTake(v CountryVelocity, c ChallengePolicy, historyMinSends int64, unverified UnverifiedTake, r, id string, now time.Time) VolumeTake {
	fl := c.Floor
	if fl <= 0 {
		fl = v.floor(r)
	}
	return VolumeTake{Key: solvedKey(id), Quarantine: solvedCutKey(id), Now: now, Hour: hour(now),
		Lookback: int64(v.Lookback / time.Hour), Floor: fl, QFloor: max(1, fl/10), Factor: 1,
		HistoryMinSends: historyMinSends, Unverified: unverified, GrowthPerDay: v.GrowthPerDay,
		Solved: &SolvedUse{Base: velocityKey(id)}}
}

// unverifiedTake is the unverified budget the policy gives an untrusted
// send (unverified.go): none without challenges, since what it holds back
// must meet a challenge, never a refusal (real users' new numbers arrive
// with the attacker's).
func (s *velocity) unverifiedTake() UnverifiedTake {
	return unverifiedTakeOf(s.policy, s.challenges.on)
}

// unverifiedTakeOf is unverifiedTake for the rule v, challenges on or not.
func unverifiedTakeOf(v CountryVelocity, challenges bool) UnverifiedTake {
	if v.UnverifiedFloor <= 0 || !challenges {
		return UnverifiedTake{}
	}
	return UnverifiedTake{Floor: v.UnverifiedFloor, Share: v.UnverifiedShare,
		NormalDefault: unverifiedNormalDefault, NormalMin: unverifiedNormalMin}
}

// creditVerify counts a verified code towards its country's baseline.
func (s *velocity) creditVerify(ctx context.Context, phone Phone) {
	if !s.on(!s.safe.creditable(phone)) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	v := s.policy
	if err := s.volumes.CountVerified(cctx, velocityKey(phone.in(region(phone))), s.carrierTake(phone, false).Key, hour(s.now()), v.ttl()); err != nil {
		s.log.WarnContext(ctx, "country velocity: counting a verify failed", "err", err)
	}
}

// quarantine drops the floor of a country's room (its ID, room.go) for
// ttl (the conversion watch found its codes unverified).
func (s *velocity) quarantine(ctx context.Context, room string, ttl time.Duration) bool {
	if s.volumes == nil || s.policy.Mode != VelocityEnforce {
		return false
	}
	if err := s.volumes.Quarantine(ctx, quarantineKey(room), s.now().Add(ttl), ttl); err != nil {
		s.log.WarnContext(ctx, "country velocity: quarantine failed", "room", room, "err", err)
		return false
	}
	return true
}
