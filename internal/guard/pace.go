package guard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// Trust that cannot be minted in bulk (docs/abuse.md). An attacker that
// owns its numbers verifies every code, and verified sends are what the
// baselines learn from and what trust is earned by. Two bounds keep it
// from minting either in bulk.
//
// The bounded pace (otp.country_velocity.growth_per_day, default 2): a
// tier's counts of a country (the new numbers' and the trusted tier's,
// each its own hash; the store's script applies it to whichever hash the
// send counts in) remember the largest baseline they had in each day, and
// no hour of a day may have a baseline above growth_per_day x the largest
// such baseline of the three days before, at least the floor. Counts with
// no record at all take the history they have as the day before's: a
// country without history starts from the floor, one whose history the
// pace meets for the first time keeps it. The growth within the hour that
// the hour's own verified sends earn (unverified.go) stops at factor x
// that same ceiling. Real users' surges over the week's busiest hour pass
// up to factor x growth_per_day of it while they verify; a ring that
// verifies every code can double its country's room a day, no faster.
//
// Held marks (otp.trust.hold_for, default 72h): a verify's trust mark
// earned in an hour whose untrusted sends, or the hour before's, ran above
// max(floor, growth_per_day x the hour's baseline) counts only hold_for
// after it was earned: one hour of new numbers above a day's growth of the
// country's busiest verified hour. Real users send about their baseline /
// their conversion (1.2x at 85 %); a ring that verifies its own codes goes
// past it by the growth within the hour, and its hour keeps the next one
// judged while it runs. A policy without the pace (GrowthPerDay 0, which a
// policy file never gives) judges by the velocity factor instead: the
// hour's limit before that growth. Its number verifies normally, and its
// sends are a new number's until then.
//
// Per carrier: while the carriers split the country's room
// (carriershare.go), the hour is judged by the number's carrier: held when
// the carrier's untrusted sends of the hour, or of the hour before, ran
// above its part of the same line (carrier_room of its share, at least the
// carrier floor). A ring owns numbers in the ranges of the carriers whose
// termination it shares, so a farm on one carrier holds the marks of that
// carrier's hour, and the real users of the other carriers, new in the
// same hour, earn marks that count at once. The country's test is not kept
// beside it: it would hold every carrier's users again whenever a farm on
// one carrier made the country's hour abnormal. A farm spread over every
// carrier makes every carrier's hour abnormal as it did the country's, and
// one that stays under every carrier's line earns no more than under the
// country's, but for the carriers' floors (a tenth of the country's floor
// each), and must own numbers on every carrier to do it. While a carrier's
// share is 1000 (a country's history too thin to split, or one carrier)
// the country's counts judge, as without the split.
//
// The mark's script decides it from the country's (and the carrier's)
// counts in the same atomic step, under the same hash tag: no extra round
// trip. Imports and the app's account flag are never held (the app
// vouches); a mark that exists keeps its time.

// heldNotes is, per country (and carrier), the last hour whose held marks
// this instance claimed the audit of.
type heldNotes struct {
	mu    sync.Mutex
	hours map[string]int64
}

// noteHeld reports whether this instance has not yet claimed subject's
// hour hr (a country, or "<country>/<carrier key>"), and notes it.
func (s *trust) noteHeld(subject string, hr int64) bool {
	s.heldNoted.mu.Lock()
	defer s.heldNoted.mu.Unlock()
	if s.heldNoted.hours == nil {
		s.heldNoted.hours = map[string]int64{}
	}
	if s.heldNoted.hours[subject] >= hr {
		return false
	}
	s.heldNoted.hours[subject] = hr
	return true
}

// holdIfAbnormal completes a verify's mark with what the store needs to
// hold it: nothing when holds are off or the velocity rule does not count
// the country's new numbers (its counts are what an hour is judged by);
// the carrier's counts too while the carriers split the country.
func (s *trust) holdIfAbnormal(m *TrustMark, phone Phone) {
	v := s.velocity
	if s.policy.HoldFor <= 0 || v == nil || !v.on(false) {
		return
	}
	r := region(phone)
	m.Hold, m.Volume = s.policy.HoldFor, velocityKey(phone.in(region(phone)))
	m.Floor, m.Factor = v.policy.floor(r), v.policy.GrowthPerDay
	if m.Factor <= 0 {
		m.Factor = v.policy.Factor
	}
	if c := v.carrierTake(phone, false); c.FloorShare > 0 {
		m.Carrier, m.CarrierFloorShare = c.Key, c.FloorShare
	}
}

// held counts a mark written held: in the metric each time, and once per
// country (or carrier, byCarrier: its carrier's counts judged the hour)
// and hour across instances in the audit trail and the log. The claim is
// asked once per subject and hour by each instance (heldNoted), so the
// verifies of an abnormal hour wait on no extra round trip but the first.
func (s *trust) held(ctx context.Context, phone Phone, hr int64, byCarrier bool) {
	r, id := region(phone), phone.in(region(phone))
	v := s.velocity
	var c Carrier
	subject, claim, whose := id, fmt.Sprintf("held:%d", hr), "the country's normal"
	if byCarrier {
		c = CarrierOf(phone)
		subject, claim = id+"/"+c.Key, fmt.Sprintf("held:%s:%d", c.Key, hr)
		whose = "its share of the country's normal"
	}
	if f := v.hooks.TrustMarkHeld; f != nil {
		f(r, c.Name)
	}
	if v.conv == nil || !s.noteHeld(subject, hr) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	first, err := v.conv.ClaimAlert(cctx, limit.Key{Space: "otp:tr", ID: id, Name: claim}, time.Hour+time.Minute)
	cancel()
	if err != nil || !first {
		return
	}
	until := s.now().Add(s.policy.HoldFor)
	attrs, scope := []any{"country", r, "until", until}, "country="+r
	if byCarrier {
		attrs, scope = append(attrs, "carrier", c.Name), scope+" carrier="+c.Name
	}
	s.log.WarnContext(ctx, "TRUST HELD: numbers verified in an hour of unusual new-number volume are not trusted yet", attrs...)
	s.events.Record(Event{At: s.now(), Action: ActionTrustHeld, Outcome: "held", Country: r, Service: phone.service, Carrier: c.Name, Actor: VelocityActor,
		TraceID: TraceID(ctx), RequestID: RequestID(ctx),
		Detail: fmt.Sprintf("%s trust marks earned this hour count from %s (hold %s): its new numbers ran above %s",
			scope, until.UTC().Format(time.RFC3339), s.policy.HoldFor, whose)})
}
