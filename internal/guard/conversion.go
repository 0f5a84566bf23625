package guard

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The conversion watch. Codes sent to real users are mostly verified;
// codes sent to pumped numbers never are, because nobody reads them. So,
// per number prefix at each depth (per_prefix and prefix_depths) and per
// country, the watch counts sends and successful verifies over a sliding
// hour (ConversionWindow). A send counts only once it is older than
// conversion.delay (2 minutes by default): by then a real user has
// verified, so an unverified send is unconverted, and a burst of real
// sign-ins whose codes are still on their way never looks like pumping.
// When at least min_sends such sends are in the hour and fewer than
// min_rate of them were verified:
//
//   - monitor: one error log, one metric and one audit event per subject
//     and hour, across all instances;
//   - block (the default): the same, and the prefix goes on the deny-list
//     for block_for, authored by ConversionActor, so that it shows in the
//     ops view with its reason and can be lifted there. A country is not
//     deny-listed (blocking a whole country is a decision for a person):
//     it is quarantined for country_velocity.quarantine_for, which drops its country velocity
//     floor to a tenth and keeps whatever its verified history earned.
//
// The clock is the service's (Now), in one-minute buckets, like the
// country velocity rule's hours. Safe-listed numbers are not counted. The
// watch is advisory: when its store fails, sends and verifies go on and
// the failure is logged. It runs after the answer, batched (watch.go).

// ConversionActor is the author of the deny-list entries the conversion
// watch adds; the ops view shows it.
const ConversionActor = "otpguard:conversion-watch"

// ConversionWindow is the sliding window of the conversion watch.
const ConversionWindow = time.Hour

// ConversionKind is what one conversion event counts.
type ConversionKind string

// The events of the conversion watch.
const (
	ConversionSend   ConversionKind = "s"
	ConversionVerify ConversionKind = "v"
)

// Tally is one subject's sends and successful verifies in the window.
type Tally struct {
	Sends    int64
	Verifies int64
}

// Rate is verifies / sends (1 when nothing was sent).
func (t Tally) Rate() float64 {
	if t.Sends == 0 {
		return 1
	}
	return float64(t.Verifies) / float64(t.Sends)
}

// Conversions keeps the sliding-hour tallies of the conversion watch.
type Conversions interface {
	// CountConversion adds one event of kind, at now, to each subject and
	// returns each subject's tally: the sends of the window that are
	// older than delay, and the verifies of the whole window.
	CountConversion(ctx context.Context, kind ConversionKind, now time.Time, window, delay time.Duration, subjects []limit.Key) ([]Tally, error)
	// ClaimAlert reports whether this caller is the first, across all
	// instances, to claim subject's alert within ttl.
	ClaimAlert(ctx context.Context, subject limit.Key, ttl time.Duration) (bool, error)
	// ReleaseAlert gives a claim back (its alert could not be acted on).
	ReleaseAlert(ctx context.Context, subject limit.Key) error
}

// AutoBlocker adds deny-list entries on the watch's behalf: the ops desk
// (ops.Desk), which reloads the deny-list and audits the change.
type AutoBlocker interface {
	AddDeny(ctx context.Context, e DenyEntry, actor string) (DenyEntry, error)
}

// threshold is the conversion below which a tally is suspicious: min_rate,
// or relative x the country's normal when that is known and higher.
type threshold struct {
	rate   float64
	normal float64 // the country's normal conversion; 0: not known or not asked
}

// conversionWatch counts the sends and verifies of an OTP service in
// their prefixes' and country's tallies, off the request path (watch.go),
// and raises the alerts of those that fall below the threshold.
type conversionWatch struct {
	policy    ConversionPolicy
	conv      Conversions // nil: no conversion watch
	autoBlock AutoBlocker
	hooks     AbuseHooks
	safe      safeList
	prefixes  []PrefixWindow // the prefix depths (prefixLimits)
	velocity  *velocity
	solved    *solvedCap
	events    EventSink
	log       *slog.Logger
	now       func() time.Time
	// q is the queue and its drainer; nil without conv.
	q *watchQueue
}

// convThreshold is the threshold of a tally of e's subjects. The country's
// normal (the velocity rule's verified sends / sends over its lookback) is
// read only for a tally that could fall below relative x normal, once per
// country and batch (normals; -1: not known).
func (s *conversionWatch) convThreshold(e watchEvent, t Tally, normals map[string]float64) threshold {
	c := s.policy
	th := threshold{rate: c.MinRate}
	n, ok := s.velocity.volumes.(Normals)
	if !ok || c.Relative <= 0 || t.Sends < c.MinSends || t.Rate() >= c.Relative || t.Rate() < c.MinRate {
		return th
	}
	r := e.phone.in(region(e.phone))
	normal, seen := normals[r]
	if !seen {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), convTimeout)
		rate, known, err := n.NormalConversion(ctx, velocityKey(r), hour(e.at))
		cancel()
		if err != nil {
			s.log.WarnContext(e.ctx, "conversion watch: reading the normal conversion failed", "room", r, "err", err)
		}
		normal = -1
		if err == nil && known {
			normal = rate
		}
		normals[r] = normal
	}
	if normal > 0 && c.Relative*normal > th.rate {
		th = threshold{rate: c.Relative * normal, normal: normal}
	}
	return th
}

// convTimeout bounds one call of the watch: it must never hold up a send.
const convTimeout = time.Second

// conversionSubjects are the prefix tallies of phone at each depth, and
// its country's; a solved send's (and its verify's) is its country's
// solved tally alone (challenge.go), and its carrier's within the country
// when the carriers split the country's room (carriershare.go). The
// country's is judged beside its carriers' because the carriers' floors
// add up: a bot spread over every carrier would keep each cut carrier's
// floor, more in all than the country's cut. A bot on one carrier moves
// the country's tally only by that carrier's share of the cap, so the
// country is cut only when most of its solved sends go unverified.
func (s *conversionWatch) conversionSubjects(phone Phone, solved bool) []limit.Key {
	if solved {
		country := limit.Key{Space: "conv:solved", ID: phone.in(region(phone)), Name: "m"}
		if c := s.velocity.carrierTake(phone, false); c.FloorShare > 0 {
			return []limit.Key{{Space: "conv:solved", ID: phone.in(region(phone)), Name: c.Key.Name + ":m"}, country}
		}
		return []limit.Key{country}
	}
	var out []limit.Key
	seen := map[string]bool{}
	for _, pp := range s.prefixes {
		if p := Prefix(phone.E164, pp.DigitsDropped); !seen[p] {
			seen[p] = true
			out = append(out, limit.Key{Space: "conv:prefix", ID: phone.in(p), Name: "m"})
		}
	}
	return append(out, limit.Key{Space: "conv:country", ID: phone.in(region(phone)), Name: "m"})
}

// send queues a code that left: the watch counts it and judges its
// prefixes and country after the answer (watch.go).
func (s *conversionWatch) send(ctx context.Context, phone Phone, tier Tier) {
	if tier == TierTrusted { // trusted sends teach no baseline (creditable)
		return
	}
	s.enqueue(ctx, phone, ConversionSend, tier == TierSolved)
}

// verify queues a successful verify: it raises its prefix's and
// country's conversion (the solved tally's, for a solved send's code).
func (s *conversionWatch) verify(ctx context.Context, phone Phone, solved bool) {
	s.enqueue(ctx, phone, ConversionVerify, solved)
}

// conversionAlert reports (and in block mode blocks) a subject whose
// conversion fell below the threshold, once per period across instances.
func (s *conversionWatch) conversionAlert(ctx context.Context, phone Phone, subject limit.Key, t Tally, th threshold) {
	c := s.policy
	scope := subject.Space[len("conv:"):]
	block := c.Mode == ConversionBlock && scope == "prefix"
	period := ConversionWindow
	if c.Mode == ConversionBlock {
		period = c.BlockFor
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	// One claim per period of the service's clock (not a TTL alone), so
	// that a test driving the clock sees the periods real time would.
	// A carrier's solved tally ("c:<carrier>:m") is a subject of its own.
	carrier, carrierName := solvedCarrier(subject), ""
	claimName := fmt.Sprintf("alert:%d", s.now().Unix()/int64(period/time.Second))
	if carrier != "" {
		claimName, carrierName = "c:"+carrier+":"+claimName, CarrierOf(phone).Name
	}
	claim := limit.Key{Space: subject.Space, ID: subject.ID, Name: claimName}
	first, err := s.conv.ClaimAlert(cctx, claim, period)
	if err != nil {
		s.log.WarnContext(ctx, "conversion watch: claiming an alert failed", "err", err)
		return
	}
	if !first {
		return // another request or instance reported it this period
	}
	reason := fmt.Sprintf("conversion watch: %d verified against %d codes sent in the last hour and older than %s (%.1f%%), below min_rate %.1f%%",
		t.Verifies, t.Sends, c.Delay, 100*t.Rate(), 100*c.MinRate)
	if th.normal > 0 {
		reason = fmt.Sprintf("conversion watch: %d verified against %d codes sent in the last hour and older than %s (%.1f%%), below %g x the country's normal %.1f%%",
			t.Verifies, t.Sends, c.Delay, 100*t.Rate(), c.Relative, 100*th.normal)
	}
	action := OutcomeReported
	if qf := s.velocity.policy.QuarantineFor; c.Mode == ConversionBlock && scope == "country" && s.velocity.quarantine(cctx, subject.ID, qf) {
		action = OutcomeQuarantined
		reason += fmt.Sprintf("; country velocity floor cut to a tenth for %s", qf)
	}
	if c.Mode == ConversionBlock && scope == "solved" && s.solved.cut(cctx, subject.ID, carrier) {
		action = OutcomeQuarantined
		if carrier != "" {
			reason += "; the carrier's solved-challenge cap in the country cut to a tenth"
		} else {
			reason += "; the country's solved-challenge cap cut to a tenth"
		}
	}
	if block {
		if s.autoBlock == nil {
			s.log.ErrorContext(ctx, "conversion watch: block mode without a deny-list: only reporting", "prefix", subject.ID)
		} else {
			until := s.now().Add(c.BlockFor)
			e, err := s.autoBlock.AddDeny(cctx, DenyEntry{Pattern: subjectOf(subject.ID), Reason: reason, ExpiresAt: &until}, ConversionActor)
			if err != nil {
				s.log.ErrorContext(ctx, "conversion watch: adding the block failed; the next send tries again", "prefix", subject.ID, "err", err)
				if rerr := s.conv.ReleaseAlert(cctx, claim); rerr != nil {
					s.log.WarnContext(ctx, "conversion watch: releasing the alert failed", "err", rerr)
				}
				return
			}
			action = OutcomeBlocked
			reason += fmt.Sprintf("; deny-list entry %d until %s", e.ID, until.UTC().Format(time.RFC3339))
		}
	}
	if h := s.hooks.ConversionAlert; h != nil {
		h(scope, action)
	}
	attrs := []any{"scope", scope, "subject", subject.ID, "action", action, "mode", string(c.Mode),
		"sends", t.Sends, "verifies", t.Verifies, "min_rate", c.MinRate, "threshold", th.rate}
	detail := fmt.Sprintf("%s=%s %s", scope, subject.ID, reason)
	if carrierName != "" {
		attrs = append(attrs, "carrier", carrierName)
		detail = fmt.Sprintf("%s=%s carrier=%s %s", scope, subject.ID, carrierName, reason)
	}
	s.log.ErrorContext(ctx, "CONVERSION ALERT: codes are sent but not verified (SMS pumping?)", attrs...)
	country := phone.Region
	if scope == "country" || scope == "solved" {
		country = region(phone)
	}
	s.events.Record(Event{At: s.now(), Action: ActionConversion, Outcome: action, Country: country, Service: phone.service, Carrier: carrierName,
		Actor: ConversionActor, Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}

// solvedCarrier is the carrier key of a carrier's solved tally
// ("c:<carrier>:m"), "" for any other subject.
func solvedCarrier(subject limit.Key) string {
	if subject.Space != "conv:solved" {
		return ""
	}
	k, ok := strings.CutPrefix(subject.Name, "c:")
	if !ok {
		return ""
	}
	return strings.TrimSuffix(k, ":m")
}
