package guard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nyaruka/phonenumbers"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
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
	// minute).
	RefundVolume(ctx context.Context, k limit.Key, at time.Time) error
	// CountVerified counts one verified code in hour: the credit of the hour.
	CountVerified(ctx context.Context, k limit.Key, hour int64, ttl time.Duration) error
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

// VelocityActor is the author of the velocity rule's audit events.
const VelocityActor = "otpguard:country-velocity"

// velocityTTL is how long a country's counters outlive their last write:
// the lookback and one hour more, so the oldest hour is still there when
// the baseline reads it.
func (v CountryVelocity) ttl() time.Duration { return v.Lookback + 2*time.Hour }

func region(p Phone) string {
	if p.Region == "" {
		return "001" // non-geographic numbers (+800, +882...)
	}
	return p.Region
}

func velocityKey(region string) limit.Key { return limit.Key{Space: "otp:vel", ID: region, Name: "h"} }

func quarantineKey(region string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "quarantine"}
}

// hour is the hour bucket of t.
func hour(t time.Time) int64 { return t.Unix() / 3600 }

// velocityOn reports whether the rule applies to phone.
func (s *OTP) velocityOn(safe bool) bool {
	return s.abuse.volumes != nil && s.policy.CountryVelocity.Mode == VelocityEnforce && !safe
}

// velocityFloor is the country's floor: the larger of the policy's floor
// and the volume declared for it.
func (v CountryVelocity) floor(region string) int64 {
	return max(v.Floor, v.Expected[region])
}

// volumeTake is the velocity rule's count of one send to phone's country
// in the hour under way.
func (s *OTP) volumeTake(phone Phone) VolumeTake {
	v := s.policy.CountryVelocity
	r := region(phone)
	now := s.now()
	fl := v.floor(r)
	return VolumeTake{Key: velocityKey(r), Quarantine: quarantineKey(r), Now: now, Hour: hour(now),
		Lookback: int64(v.Lookback / time.Hour), Floor: fl, QFloor: max(1, fl/10),
		Factor: v.Factor, HistoryMinSends: s.policy.Conversion.HistoryMinSends, MinuteShare: v.MinuteShare,
		Unverified: s.unverifiedTake()}
}

// takeVelocity counts one send to phone's country in the hour under way,
// on its own (a counter that is not a SendCounter). It returns whether it
// counted (a refund is then owed if the send does not go on), in the
// trusted tier or not, and the refusal, if any.
func (s *OTP) takeVelocity(ctx context.Context, phone Phone, t VolumeTake) (counted, trusted bool, err error) {
	if t.Solved != nil && limit.StoreFailed(ctx) {
		return false, false, limit.StoreUnavailable(limit.ErrStoreUnavailable, limit.StoreRetryAfter) // single use needs the store
	}
	if limit.StoreFailed(ctx) {
		// The store failed earlier in this decision and the fallback let
		// the send on: the velocity rule cannot be judged, the split
		// limits and the spend budget bound it (README, "Cold start").
		return false, false, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	res, err := s.abuse.volumes.TakeVolume(cctx, t)
	cancel()
	if err != nil {
		limit.NoteStoreFailure(ctx)
		if s.policy.OnStoreError == limit.FallbackClosed || t.Solved != nil {
			s.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "country_velocity", "err", err)
			return false, false, limit.StoreUnavailable(err, limit.StoreRetryAfter)
		}
		s.log.WarnContext(ctx, "country velocity: store failed; not judged", "err", err)
		return false, false, nil
	}
	if res.Allowed {
		return volumeCounted(&t, &res), res.Trusted, nil
	}
	return false, false, s.velocityDenied(ctx, phone, t, res)
}

// velocityDenied is the refusal of a send the velocity rule refused (res),
// told to the metrics, the log and the ops desk (velocityRefused).
func (s *OTP) velocityDenied(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult) error {
	if t.Solved != nil {
		return s.solvedDenied(ctx, phone, t, res)
	}
	if res.Unverified > 0 && !res.Trusted {
		return s.unverifiedDenied(ctx, phone, t, res)
	}
	now, h := t.Now, t.Hour
	if res.Trusted { // the trusted tier's cap: no country alert, the new tier is not refusing
		if f := s.abuse.hooks.VelocityRefused; f != nil {
			f(region(phone))
		}
		return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: time.Unix((h+1)*3600, 0).Sub(now),
			Usage:   Usage(res.Count+1, res.Limit, time.Hour),
			Message: "unusually many codes were sent to returning numbers of this country this hour; try again later"}
	}
	retry, span := time.Unix((h+1)*3600, 0).Sub(now), "hour"
	if res.Count < res.Limit { // the minute's share is spent, not the hour
		retry, span = time.Unix((now.Unix()/60+1)*60, 0).Sub(now), "minute"
	}
	s.velocityRefused(ctx, phone, region(phone), h, res, now.Add(retry))
	usage := Usage(res.Count+1, res.Limit, time.Hour)
	if span == "minute" {
		usage = Usage(0, res.MinuteLimit, time.Minute)
	}
	return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: usage,
		Message: "unusually many codes were sent to this country this " + span + "; try again later"}
}

// refundVelocity gives back a send counted at under k (the velocity
// rule's, the trusted tier's or the solved cap's counts) that did not leave.
//
// A refund is part of the count, not of the watch: it gets the store's
// Redis budget (the client bounds a call without a deadline by
// max(OTPGUARD_REDIS_TIMEOUT, OTPGUARD_REDIS_MAX_WAIT)), as the limits'
// refunds in the same refusal do, and not convTimeout. A refund lost to a
// fixed second on a busy host left a send that never went in the
// country's hour, for real users to be refused by (unusual_volume).
func (s *OTP) refundVelocity(ctx context.Context, k limit.Key, at time.Time) {
	if err := s.abuse.volumes.RefundVolume(context.WithoutCancel(ctx), k, at); err != nil {
		s.log.WarnContext(ctx, "country velocity: refund failed", "err", err)
	}
}

// creditable reports whether a send to phone, or the verify of its code,
// counts in the baselines of the country and prefix rules (the velocity
// credit and normal, the conversion watch's tallies): only untrusted
// traffic does, so a surge of returning users never spends the room new
// numbers get and their conversion never hides an attack. Today that is
// every number off the safe list whose send is not TierTrusted (watchSend)
// and whose verify is not a trusted number's (VerifyCode, rememberVerified).
func (s *OTP) creditable(phone Phone) bool {
	return !s.safe(phone.E164)
}

// creditVerify counts a verified code towards its country's baseline.
func (s *OTP) creditVerify(ctx context.Context, phone Phone) {
	if !s.velocityOn(!s.creditable(phone)) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	v := s.policy.CountryVelocity
	if err := s.abuse.volumes.CountVerified(cctx, velocityKey(region(phone)), hour(s.now()), v.ttl()); err != nil {
		s.log.WarnContext(ctx, "country velocity: counting a verify failed", "err", err)
	}
}

// quarantine drops a country's floor for ttl (the conversion watch found
// its codes unverified).
func (s *OTP) quarantine(ctx context.Context, region string, ttl time.Duration) bool {
	if s.abuse.volumes == nil || s.policy.CountryVelocity.Mode != VelocityEnforce {
		return false
	}
	if err := s.abuse.volumes.Quarantine(ctx, quarantineKey(region), s.now().Add(ttl), ttl); err != nil {
		s.log.WarnContext(ctx, "country velocity: quarantine failed", "country", region, "err", err)
		return false
	}
	return true
}

// CountryPrefix is the "+" and calling code of an ISO region ("NG" ->
// "+234"): how a country shows in the ops desk's block list.
func CountryPrefix(region string) string {
	if cc := phonenumbers.GetCountryCodeForRegion(region); cc != 0 {
		return fmt.Sprintf("+%d", cc)
	}
	return "+" + region
}

// velocityRefused tells the metrics of every refusal and, once per country
// and hour across instances, logs an error and records an audit event. It
// notes the country on the ops desk's block list until the refusal's end
// (end: the hour's, or the minute's) beside the alert's claim, so that the
// refusal waits on one round trip for both: once per instance and end
// (countryNoteDue), not only after the claim, which made the hour's first
// refusal wait on the two one after the other. note_block.lua keeps the
// block's start and the later end, so a note from each instance is one
// block.
func (s *OTP) velocityRefused(ctx context.Context, phone Phone, r string, h int64, res VolumeResult, end time.Time) {
	if f := s.abuse.hooks.VelocityRefused; f != nil {
		f(r)
	}
	if s.abuse.conv == nil {
		return
	}
	var wg sync.WaitGroup
	if s.countryNoteDue(r, end) {
		wg.Go(func() {
			s.noteBlock(ctx, Block{Phone: CountryPrefix(r), Country: r, Reason: problem.CodeUnusualVolume, Count: res.Count, Until: end})
		})
	}
	defer wg.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	first, err := s.abuse.conv.ClaimAlert(cctx, limit.Key{Space: "otp:vel", ID: r, Name: fmt.Sprintf("alert:%d", h)}, time.Hour+time.Minute)
	if err != nil || !first {
		return
	}
	if f := s.abuse.hooks.VelocityAlert; f != nil {
		f(r)
	}
	detail := fmt.Sprintf("country=%s unusual volume: %d sends this hour against the limit %d (baseline %d, floor %d, factor %g%s)",
		r, res.Count, res.Limit, res.Baseline, s.policy.CountryVelocity.floor(r), s.policy.CountryVelocity.Factor,
		map[bool]string{true: ", quarantined", false: ""}[res.Quarantined])
	if res.Count < res.Limit {
		detail += fmt.Sprintf("; this minute reached its cap %d", res.MinuteLimit)
	}
	s.log.ErrorContext(ctx, "UNUSUAL VOLUME: sends to a country refused for the rest of the hour (SMS pumping?)",
		"country", r, "count", res.Count, "limit", res.Limit, "baseline", res.Baseline,
		"retry_after", end.Sub(s.now()).Round(time.Second).String())
	s.events.Record(Event{At: s.now(), Action: ActionVelocity, Outcome: string(problem.CodeUnusualVolume), Country: r,
		Actor: VelocityActor, Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}

// countryNoteDue reports whether a velocity block of country r ending at
// end outlasts what this instance noted, and takes it as noted: the
// refusals of one hour (or minute) note the country once per instance.
// Ends already past are forgotten, so the map holds the countries refused
// now.
func (s *OTP) countryNoteDue(r string, end time.Time) bool {
	now := s.now()
	s.abuse.mu.Lock()
	defer s.abuse.mu.Unlock()
	if !end.After(s.abuse.countryNoted[r]) {
		return false
	}
	for c, e := range s.abuse.countryNoted {
		if !e.After(now) {
			delete(s.abuse.countryNoted, c)
		}
	}
	s.abuse.countryNoted[r] = end
	return true
}
