package guard

import (
	"context"
	"errors"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
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

// Block is a number that is refused now, and why.
type Block struct {
	Phone   string       // E.164
	Country string       // ISO region, may be ""
	Reason  problem.Code // cooldown, phone_rate_limited, too_many_attempts, ...
	Count   int64        // the counter's value when it refused, where there is one
	Until   time.Time
}

// Blocks keeps an index of blocked numbers, so the ops view can list them
// without scanning the store.
type Blocks interface {
	NoteBlock(ctx context.Context, b Block) error
	// EndBlock removes the number's block if it is for reason: a new code
	// ends a lock-out by wrong guesses.
	EndBlock(ctx context.Context, phone string, reason problem.Code) error
}

// BlockVolumeRefunder is a Blocks whose store also keeps the country
// velocity counts (Volumes): it notes a refused send's block and gives
// back the send's count in k at at in one round trip (refused).
type BlockVolumeRefunder interface {
	NoteBlockRefundVolume(ctx context.Context, b Block, k limit.Key, at time.Time) error
}

type noDeny struct{}

func (noDeny) Denied(string, time.Time) (DenyEntry, bool) { return DenyEntry{}, false }

type noEvents struct{}

func (noEvents) Record(Event) {}

type noBlocks struct{}

func (noBlocks) NoteBlock(context.Context, Block) error { return nil }

func (noBlocks) EndBlock(context.Context, string, problem.Code) error { return nil }

// record hands the decision to the audit sink: outcome is ok's label on
// success and the refusal's code otherwise. Never the code itself.
func (s *OTP) record(ctx context.Context, action, ok string, phone Phone, ip string, err error) {
	s.recordTier(ctx, action, ok, phone, ip, err, TierNew)
}

// recordTier is record, for a send of tier.
func (s *OTP) recordTier(ctx context.Context, action, ok string, phone Phone, ip string, err error, tier Tier) {
	outcome := ok
	if err != nil {
		outcome = string(problem.CodeOf(err))
	}
	var detail string
	if e, ok := errors.AsType[*problem.Error](err); ok {
		detail = e.Usage
	}
	s.events.Record(Event{At: s.now(), Action: action, Outcome: outcome, Phone: phone.E164, Country: phone.Region, IP: ip,
		Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx), Trusted: err == nil && tier == TierTrusted})
}

func (s *OTP) noteBlock(ctx context.Context, b Block) {
	if err := s.blocks.NoteBlock(context.WithoutCancel(ctx), b); err != nil {
		s.log.WarnContext(ctx, "noting a block failed", "phone", MaskPhone(b.Phone), "err", err)
	}
}
