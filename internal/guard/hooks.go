package guard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// DenyChecker answers, from memory, whether a number is deny-listed. It is
// asked on every send, before any counter is spent.
type DenyChecker interface {
	Denied(e164 string, now time.Time) (DenyEntry, bool)
}

// EventSink takes audit events off the request path. Record must not block
// and must not fail the request: a full queue drops and counts.
type EventSink interface {
	Record(e Event)
}

type noDeny struct{}

func (noDeny) Denied(string, time.Time) (DenyEntry, bool) { return DenyEntry{}, false }

type noEvents struct{}

func (noEvents) Record(Event) {}

// audit is where a decision leaves its trace: the audit sink's event and
// the block index's note.
type audit struct {
	events EventSink
	blocks Blocks
	log    *slog.Logger
	now    func() time.Time
}

// record hands the decision to the audit sink: outcome is ok's label on
// success and the refusal's code otherwise; service is the service the
// call acted for ("" the default service). Never the code itself.
func (s *audit) record(ctx context.Context, action, ok string, phone Phone, ip, service string, err error) {
	s.recordTier(ctx, action, ok, phone, ip, service, err, TierNew)
}

// recordTier is record, for a send of tier: a solved send's event, and
// the solved cap's refusal's (errSolvedCap), are marked Solved.
func (s *audit) recordTier(ctx context.Context, action, ok string, phone Phone, ip, service string, err error, tier Tier) {
	outcome := ok
	if err != nil {
		outcome = string(problem.CodeOf(err))
	}
	var detail string
	if e, ok := errors.AsType[*problem.Error](err); ok {
		detail = e.Usage
	}
	s.events.Record(Event{At: s.now(), Action: action, Outcome: outcome, Phone: phone.E164, Country: phone.Region, IP: ip,
		Service: service, Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx), Trusted: err == nil && tier == TierTrusted,
		Solved: err == nil && tier == TierSolved || errors.Is(err, errSolvedCap)})
}
