// Package guarded holds the Redis adapters behind the breaker: the store's
// calls that decide nothing (the conversion watch, the block index, the
// attack view, idempotency records, verification reads, trust marks) made
// through resilience.Fallback's breaker and timeout, so that a Redis the
// probe finds dead costs them no round trip. Decisions go through the
// Fallback itself.
package guarded

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
)

// Store is the Redis store as the advisory users see it: the conversion
// watch and the block index, which decide nothing, reach Redis through the
// Fallback's breaker and timeout. While the breaker is open they make no
// Redis call at all. On Redis Cluster each goes through the breaker of the
// master its keys live on (Fallback.DoFor; the conversion watch one call
// per master, nodes.go). The block index (noted on every refusal, a burst
// of them under attack) and Unblock, whose counters span slots, go through
// the cluster-wide one (Fallback.Do): their timeouts under load must not
// open a breaker decisions go through.
type Store struct {
	fb *resilience.Fallback
	st *store.Redis
}

// New is st reached through fb's breakers and timeout.
func New(fb *resilience.Fallback, st *store.Redis) Store { return Store{fb: fb, st: st} }

var (
	_ guard.Conversions         = Store{}
	_ guard.ConversionBatcher   = Store{}
	_ ops.BlockIndex            = Store{}
	_ guard.BlockVolumeRefunder = Store{}
)

// The calls below read what their call wrote only when it returned (err ==
// nil): after the Fallback gives up on a call, the call may still write.

func (g Store) ClaimAlert(ctx context.Context, subject limit.Key, ttl time.Duration) (bool, error) {
	var ok bool
	err := g.fb.DoFor(ctx, subject, func(ctx context.Context) (err error) {
		ok, err = g.st.Conversions.ClaimAlert(ctx, subject, ttl)
		return err
	})
	return err == nil && ok, err
}

func (g Store) ReleaseAlert(ctx context.Context, subject limit.Key) error {
	return g.fb.DoFor(ctx, subject, func(ctx context.Context) error { return g.st.Conversions.ReleaseAlert(ctx, subject) })
}

func (g Store) NoteBlock(ctx context.Context, b guard.Block) error {
	return g.fb.Do(ctx, func(ctx context.Context) error { return g.st.Blocks.NoteBlock(ctx, b) })
}

// NoteBlockRefundVolume: the note and a refused send's velocity refund
// in one round trip (store), through the breaker as the note alone.
func (g Store) NoteBlockRefundVolume(ctx context.Context, b guard.Block, k, carrier limit.Key, at time.Time) error {
	return g.fb.Do(ctx, func(ctx context.Context) error { return g.st.Blocks.NoteBlockRefundVolume(ctx, b, k, carrier, at) })
}

func (g Store) EndBlock(ctx context.Context, phone string, reason problem.Code) error {
	return g.fb.Do(ctx, func(ctx context.Context) error { return g.st.Blocks.EndBlock(ctx, phone, reason) })
}

func (g Store) ListBlocks(ctx context.Context, match func(phone string) bool, n int) ([]ops.BlockedNumber, int, error) {
	var bs []ops.BlockedNumber
	var total int
	err := g.fb.Do(ctx, func(ctx context.Context) (err error) {
		bs, total, err = g.st.Blocks.ListBlocks(ctx, match, n)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return bs, total, nil
}

func (g Store) Unblock(ctx context.Context, phone string, counters []limit.Key, services ...string) error {
	return g.fb.Do(ctx, func(ctx context.Context) error { return g.st.Blocks.Unblock(ctx, phone, counters, services...) })
}

var _ guard.Trusts = Store{}

// MarkTrusted and Trusted go through the breaker: a verify or an import
// waits on no Redis the probe finds dead.
func (g Store) MarkTrusted(ctx context.Context, marks []guard.TrustMark, ttl time.Duration) (guard.Marked, error) {
	var n guard.Marked
	err := g.fb.Do(ctx, func(ctx context.Context) (err error) {
		n, err = g.st.TrustMarks.MarkTrusted(ctx, marks, ttl)
		return err
	})
	return n, err
}

func (g Store) Trusted(ctx context.Context, mark limit.Key, now time.Time) (bool, error) {
	var ok bool
	err := g.fb.Do(ctx, func(ctx context.Context) (err error) {
		ok, err = g.st.TrustMarks.Trusted(ctx, mark, now)
		return err
	})
	return err == nil && ok, err
}
