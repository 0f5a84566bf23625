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

// Unusual volume: a send the country velocity rule (or a tier's cap)
// refused, told to the metrics, the log, the audit trail and the ops
// desk's block list; and the rule's count taken on its own when the
// counter could not take it with the send's limits.

// VelocityActor is the author of the velocity rule's audit events.
const VelocityActor = "otpguard:country-velocity"

// settle judges a send's count in its country's hour once the send's
// limits were taken: refusal is the store's, when the count went out with
// the limits and was refused; nil when the counter could not take it, and
// then it is taken here on its own (takeAlone).
func (s *velocity) settle(ctx context.Context, phone Phone, t VolumeTake, refusal *VolumeResult) (counted, trusted bool, err error) {
	if refusal != nil {
		return false, false, s.denied(ctx, phone, t, *refusal)
	}
	return s.takeAlone(ctx, phone, t)
}

// takeAlone counts one send to phone's country in the hour under way,
// on its own (a counter that is not a SendCounter). It returns whether it
// counted (a refund is then owed if the send does not go on), in the
// trusted tier or not, and the refusal, if any.
func (s *velocity) takeAlone(ctx context.Context, phone Phone, t VolumeTake) (counted, trusted bool, err error) {
	if (t.Solved != nil || t.Vouched) && limit.StoreFailed(ctx) {
		// single use, and the vouched cap, need the store
		return false, false, limit.StoreUnavailable(limit.ErrStoreUnavailable, limit.StoreRetryAfter)
	}
	if limit.StoreFailed(ctx) {
		// The store failed earlier in this decision and the fallback let
		// the send on: the velocity rule cannot be judged, the split
		// limits and the spend budget bound it (README, "Cold start").
		return false, false, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	res, err := s.volumes.TakeVolume(cctx, t)
	cancel()
	if err != nil {
		limit.NoteStoreFailure(ctx)
		if s.onStoreError == limit.FallbackClosed || t.Solved != nil || t.Vouched {
			s.log.Log(ctx, limit.StoreFailureLevel(err), "limit store failed", "limit", "country_velocity", "err", err)
			return false, false, limit.StoreUnavailable(err, limit.StoreRetryAfter)
		}
		s.log.WarnContext(ctx, "country velocity: store failed; not judged", "err", err)
		return false, false, nil
	}
	if res.Allowed {
		return volumeCounted(&t, &res), res.Trusted, nil
	}
	return false, false, s.denied(ctx, phone, t, res)
}

// denied is the refusal of a send the velocity rule refused (res),
// told to the metrics, the log and the ops desk (refused).
func (s *velocity) denied(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult) error {
	if t.Solved != nil {
		return s.solved.denied(ctx, phone, t, res)
	}
	if t.Vouched { // no country alert: the new tier is not refusing
		return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: time.Unix((t.Hour+1)*3600, 0).Sub(t.Now),
			Usage: Usage(res.Count+1, res.Limit, time.Hour), Err: errVouchedCap,
			Message: "unusually many codes were sent to low-risk numbers of this country this hour; try again later"}
	}
	if res.Unverified > 0 && !res.Trusted {
		return s.unverified.denied(ctx, phone, t, res)
	}
	now, h := t.Now, t.Hour
	if res.Trusted { // the trusted tier's cap: no country alert, the new tier is not refusing
		if f := s.hooks.VelocityRefused; f != nil {
			f(region(phone))
		}
		return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: time.Unix((h+1)*3600, 0).Sub(now),
			Usage:   Usage(res.Count+1, res.Limit, time.Hour),
			Message: "unusually many codes were sent to returning numbers of this country this hour; try again later"}
	}
	retry, span := time.Unix((h+1)*3600, 0).Sub(now), "hour"
	if res.Count < res.Limit && !res.Carrier { // the minute's share is spent, not the hour
		retry, span = time.Unix((now.Unix()/60+1)*60, 0).Sub(now), "minute"
	}
	if res.Carrier { // the carrier's share of the hour (carriershare.go)
		goBeside(ctx, func() { s.refusedCarrier(ctx, phone, t, res, now.Add(retry)) })
		return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: Usage(res.Count+1, res.Limit, time.Hour),
			Message: "unusually many codes were sent to this carrier's numbers in this country this hour; try again later"}
	}
	goBeside(ctx, func() { s.refused(ctx, phone, h, res, now.Add(retry)) })
	usage := Usage(res.Count+1, res.Limit, time.Hour)
	if span == "minute" {
		usage = Usage(0, res.MinuteLimit, time.Minute)
	}
	return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: usage,
		Message: "unusually many codes were sent to this country this " + span + "; try again later"}
}

// CountryPrefix is the "+" and calling code of an ISO region ("NG" ->
// "+234"): how a country shows in the ops desk's block list.
func CountryPrefix(region string) string {
	if cc := phonenumbers.GetCountryCodeForRegion(region); cc != 0 {
		return fmt.Sprintf("+%d", cc)
	}
	return "+" + region
}

// refused tells the metrics of every refusal and, once per country
// and hour across instances, logs an error and records an audit event. It
// notes the country on the ops desk's block list until the refusal's end
// (end: the hour's, or the minute's) beside the alert's claim, so that the
// refusal waits on one round trip for both: once per instance and end
// (noteDue). note_block.lua keeps the block's start and the later end, so
// a note from each instance is one block.
func (s *velocity) refused(ctx context.Context, phone Phone, h int64, res VolumeResult, end time.Time) {
	r, id := region(phone), phone.in(region(phone))
	if f := s.hooks.VelocityRefused; f != nil {
		f(r)
	}
	if s.conv == nil {
		return
	}
	var wg sync.WaitGroup
	if s.noteDue(id, end) {
		wg.Go(func() {
			s.audit.noteBlock(ctx, Block{Phone: CountryPrefix(r), Country: r, Reason: problem.CodeUnusualVolume, Count: res.Count, Until: end})
		})
	}
	defer wg.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	first, err := s.conv.ClaimAlert(cctx, limit.Key{Space: "otp:vel", ID: id, Name: fmt.Sprintf("alert:%d", h)}, time.Hour+time.Minute)
	if err != nil || !first {
		return
	}
	if f := s.hooks.VelocityAlert; f != nil {
		f(r)
	}
	detail := fmt.Sprintf("country=%s unusual volume: %d sends this hour against the limit %d (baseline %d, floor %d, factor %g%s)",
		r, res.Count, res.Limit, res.Baseline, s.policy.floor(r), s.policy.Factor,
		map[bool]string{true: ", quarantined", false: ""}[res.Quarantined])
	if res.Count < res.Limit {
		detail += fmt.Sprintf("; this minute reached its cap %d", res.MinuteLimit)
	}
	s.log.ErrorContext(ctx, "UNUSUAL VOLUME: sends to a country refused for the rest of the hour (SMS pumping?)",
		"country", r, "count", res.Count, "limit", res.Limit, "baseline", res.Baseline,
		"retry_after", end.Sub(s.now()).Round(time.Second).String())
	s.audit.events.Record(Event{At: s.now(), Action: ActionVelocity, Outcome: string(problem.CodeUnusualVolume), Country: r,
		Service: phone.service, Actor: VelocityActor, Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}

// noteDue reports whether a velocity block of country room r ending at
// end outlasts what this instance noted, and takes it as noted: the
// refusals of one hour (or minute) note the country once per instance.
// Ends already past are forgotten, so the map holds the countries refused
// now.
func (s *velocity) noteDue(r string, end time.Time) bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !end.After(s.noted[r]) {
		return false
	}
	for c, e := range s.noted {
		if !e.After(now) {
			delete(s.noted, c)
		}
	}
	s.noted[r] = end
	return true
}
