package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// refusedCarrier tells the metrics of a refusal by a carrier's share of
// its country's hour (carriershare.go) and, once per carrier and hour
// across instances, logs an error and records an audit event naming the
// carrier. The country is not noted on the ops desk's block list: its
// other carriers' numbers still get codes.
func (s *velocity) refusedCarrier(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult, end time.Time) {
	r, id := region(phone), phone.in(region(phone))
	if f := s.hooks.VelocityRefused; f != nil {
		f(r)
	}
	if s.conv == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	first, err := s.conv.ClaimAlert(cctx, limit.Key{Space: "otp:vel", ID: id, Name: fmt.Sprintf("%s:alert:%d", t.Carrier.Key.Name, t.Hour)}, time.Hour+time.Minute)
	if err != nil || !first {
		return
	}
	if f := s.hooks.VelocityAlert; f != nil {
		f(r)
	}
	detail := fmt.Sprintf("country=%s carrier=%s unusual volume: %d sends to the carrier this hour against its share of the country's limit, %d (baseline %d%s)",
		r, t.Carrier.Name, res.Count, res.Limit, res.Baseline, map[bool]string{true: ", quarantined", false: ""}[res.Quarantined])
	s.log.ErrorContext(ctx, "UNUSUAL VOLUME: sends to a carrier of a country refused for the rest of the hour (SMS pumping?)",
		"country", r, "carrier", t.Carrier.Name, "count", res.Count, "limit", res.Limit, "baseline", res.Baseline,
		"retry_after", end.Sub(s.now()).Round(time.Second).String())
	s.audit.events.Record(Event{At: s.now(), Action: ActionVelocity, Outcome: string(problem.CodeUnusualVolume), Country: r,
		Service: phone.service, Carrier: t.Carrier.Name, Actor: VelocityActor, Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}
