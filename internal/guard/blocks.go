package guard

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

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
// back the send's count in k (and its carrier's, ID empty: none) at at
// in one round trip (refused).
type BlockVolumeRefunder interface {
	NoteBlockRefundVolume(ctx context.Context, b Block, k, carrier limit.Key, at time.Time) error
}

type noBlocks struct{}

func (noBlocks) NoteBlock(context.Context, Block) error { return nil }

func (noBlocks) EndBlock(context.Context, string, problem.Code) error { return nil }

// noteBlock puts b in the block index; a failure is logged, never the
// request's.
func (s *audit) noteBlock(ctx context.Context, b Block) {
	if err := s.blocks.NoteBlock(context.WithoutCancel(ctx), b); err != nil {
		s.log.WarnContext(ctx, "noting a block failed", "phone", MaskPhone(b.Phone), "err", err)
	}
}
