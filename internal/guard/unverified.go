package guard

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// The unverified budget (docs/abuse.md, "The unverified budget"). The
// country velocity rule holds a country's new numbers to a multiple of its
// normal volume, and within that an attacker whose codes nobody reads
// takes what its share of the arrivals wins: most of it. What tells the
// attacker from real users is conversion, known a minute after a send:
// real users verify 84-92 % of their codes, pumped numbers none. So each
// country's untrusted sends in the hour under way may run ahead of their
// verifies by at most a budget:
//
//	sends - verifies / normal <= max(unverified_floor, unverified_share x baseline)
//
// where normal is the country's normal conversion (NormalConversion; a
// default while unknown) and baseline the velocity rule's. Real users'
// verifies give back, a minute later, what their sends took: the budget
// only has to hold the codes in flight and the hour's chance variation.
// A campaign that verifies nothing spends it once per hour and gets no
// more, whatever it tries, however its arrivals mix with real users'; a
// campaign verifying a share c of its codes gets budget / (1 - c / normal).
// What the budget refuses meets a challenge first (challenge.go), never a
// refusal: without challenges (otp.challenge.type off, or no challenger)
// the budget is off. A quarantined country keeps a tenth of it.
//
// With the budget on, the hour's own verified sends count as a credited
// hour for the velocity limit (growth within the hour from verified sends
// only, up to the day's ceiling of the bounded pace, pace.go), so a surge
// of real users, or a fresh deployment's first hour, is not held to last
// week's volume while its users verify.
//
// The solved tier's cap (challenge.go) is held the same way: with the
// budget on, it caps the hour's solved sends that their verifies do not
// back, so a bot that solves every challenge and verifies nothing gets at
// most the cap an hour, while real users who solve and verify (every new
// user of a country under attack) are not held to last week's volume.
//
// The check runs in the velocity rule's script (store: take_volume.lua),
// on the same hash and in the same atomic step: exact over instances, one
// slot on Cluster, no extra round trip.

// UnverifiedTake is the unverified budget of one VolumeTake: Floor 0 is
// off. NormalDefault is the normal conversion (permille) assumed while the
// country's is unknown; NormalMin the least normal used (permille), so a
// country whose history is mostly unverified does not make each verify
// worth many sends.
type UnverifiedTake struct {
	Floor         int64
	Share         float64
	NormalDefault int64
	NormalMin     int64
}

// The normals the unverified budget assumes: 80 % while a country has too
// little history (a little under real users' 84-92 %, so their first
// hours do not spend the budget), never below 20 % (conversion.min_rate's
// default: below it a country's traffic is pumping already).
const (
	unverifiedNormalDefault = 800
	unverifiedNormalMin     = 200
)

// unverifiedBudget answers the refusals of the unverified budget (the
// velocity rule gives a send its budget: velocity.unverifiedTake).
type unverifiedBudget struct {
	hooks  AbuseHooks
	conv   Conversions // the alert's claim; nil: no alert
	events EventSink
	log    *slog.Logger
	now    func() time.Time
}

// denied is the refusal of a send the unverified budget refused
// (a challenge instead, when challenges are on): until the end of the
// minute, when the verifies of the codes in flight may have made room.
// It counts in the velocity rule's metric and, once per country and hour
// across instances, in the audit trail.
func (s *unverifiedBudget) denied(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult) error {
	if f := s.hooks.VelocityRefused; f != nil {
		f(region(phone))
	}
	retry := time.Unix((t.Now.Unix()/60+1)*60, 0).Sub(t.Now)
	// A carrier's share of the budget refused (carriershare.go): its own
	// alert, naming the carrier.
	claim, whose, carrier, subject := fmt.Sprintf("unverified:%d", t.Hour), "a country", "", "this country"
	carrierDetail := ""
	if res.Carrier {
		claim = t.Carrier.Key.Name + ":" + claim
		whose, carrier, subject = "a carrier of a country", t.Carrier.Name, "this carrier in this country"
		carrierDetail = " carrier=" + carrier
	}
	if s.conv != nil {
		goBeside(ctx, func() { s.alert(ctx, phone, claim, whose, carrier, carrierDetail, res) })
	}
	return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: Usage(0, res.Unverified, time.Hour),
		Message: "too many codes sent to new numbers of " + subject + " are not verified yet; try again shortly"}
}

// alert claims the budget's alert of the hour (claim) in phone's room
// across instances; the first claim logs and records it.
func (s *unverifiedBudget) alert(ctx context.Context, phone Phone, claim, whose, carrier, carrierDetail string, res VolumeResult) {
	r := region(phone)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	first, err := s.conv.ClaimAlert(cctx, limit.Key{Space: "otp:vel", ID: phone.in(region(phone)), Name: claim}, time.Hour+time.Minute)
	cancel()
	if err != nil || !first {
		return
	}
	attrs := []any{"country", r, "count", res.Count, "budget", res.Unverified, "baseline", res.Baseline}
	if carrier != "" {
		attrs = append(attrs, "carrier", carrier)
	}
	s.log.WarnContext(ctx, "UNVERIFIED BUDGET: new numbers of "+whose+" challenged until their codes are verified", attrs...)
	s.events.Record(Event{At: s.now(), Action: ActionVelocity, Outcome: string(problem.CodeUnusualVolume), Country: r,
		Service: phone.service, Carrier: carrier, Actor: VelocityActor, TraceID: TraceID(ctx), RequestID: RequestID(ctx),
		Detail: fmt.Sprintf("country=%s%s unverified budget: %d sends this hour ran %d ahead of their verifies (baseline %d%s)",
			r, carrierDetail, res.Count, res.Unverified, res.Baseline, map[bool]string{true: ", quarantined", false: ""}[res.Quarantined])})
}
