package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// The block index lists the numbers refused now without scanning Redis:
//
//	<prefix>ops:{blocks}:ends     sorted set, phone -> when its block ends (unix ms)
//	<prefix>ops:{blocks}:recent   sorted set, phone -> when its block began (unix ms)
//	<prefix>ops:{blocks}:b:<phone> hash reason, count, until, country, since;
//	                               it expires when the block ends
//
// Every key shares the hash tag {blocks}, so that one script may touch them
// all on Redis Cluster. Blocks that have ended are pruned from the sorted
// sets on every note and every read; the sets themselves expire with the
// last block.

// maxBlockScan bounds how many blocked numbers a filtered listing reads.
const maxBlockScan = 50000

// Blocks keeps the block index; Unblock also deletes the number's code
// (Codes).
type Blocks struct {
	keyspace
	codes *Codes
}

var _ ops.BlockIndex = (*Blocks)(nil)

func (r *Blocks) blockKeys(phone string) []string {
	base := r.prefix + "ops:{blocks}:"
	return []string{base + "ends", base + "recent", base + "b:" + phone}
}

// noteBlockScript records a block of ARGV[1] ending at ARGV[2] (unix ms) with
// reason ARGV[3], count ARGV[4] and country ARGV[5] (lua/note_block.lua).
var noteBlockScript = script("note_block")

// listBlocksScript prunes ended blocks (at most 1000 per call) and returns
// the number of live ones followed by the ARGV[1] most recently begun (every
// one when ARGV[1] is 0 or more than there are) (lua/list_blocks.lua).
var listBlocksScript = script("list_blocks")

// NoteBlock adds b to the index (noteBlockScript).
func (r *Blocks) NoteBlock(ctx context.Context, b guard.Block) error {
	err := noteBlockScript.Run(ctx, r.rdb, r.blockKeys(b.Phone),
		b.Phone, b.Until.UnixMilli(), string(b.Reason), b.Count, b.Country).Err()
	if err != nil {
		return fmt.Errorf("store: note block: %w", err)
	}
	return nil
}

var _ guard.BlockVolumeRefunder = (*Blocks)(nil)

// NoteBlockRefundVolume notes b (noteBlockScript) and gives back one send
// counted at under k and its carrier's counts (velocityRefundScript) in one pipeline: the two
// notes of a refused send, one round trip (two single calls would go
// through the coalescer one pipeline after the other whenever the second
// missed the first's). No MULTI: each script is atomic alone, and on Redis
// Cluster their keys are in different slots (go-redis sends each to its
// master, both at once).
func (r *Blocks) NoteBlockRefundVolume(ctx context.Context, b guard.Block, k, carrier limit.Key, at time.Time) error {
	noteKeys, noteArgs := r.blockKeys(b.Phone), []any{b.Phone, b.Until.UnixMilli(), string(b.Reason), b.Count, b.Country}
	refundKeys, refundArgs := []string{r.key(k)}, []any{at.Unix() / 3600, at.Unix() / 60}
	if carrier.ID != "" { // the carrier's count goes back with the country's (same hash tag)
		refundKeys = append(refundKeys, r.key(carrier))
	}
	pipe := r.rdb.Pipeline()
	note := noteBlockScript.EvalSha(ctx, pipe, noteKeys, noteArgs...)
	refund := velocityRefundScript.EvalSha(ctx, pipe, refundKeys, refundArgs...)
	// A NOSCRIPT is one command's answer: that script did not run, and
	// runs again by EVAL.
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return fmt.Errorf("store: note block and refund volume: %w", err)
	}
	if isNoScript(note.Err()) {
		note = noteBlockScript.Run(ctx, r.rdb, noteKeys, noteArgs...)
	}
	if isNoScript(refund.Err()) {
		refund = velocityRefundScript.Run(ctx, r.rdb, refundKeys, refundArgs...)
	}
	if err := note.Err(); err != nil {
		return fmt.Errorf("store: note block: %w", err)
	}
	if err := refund.Err(); err != nil {
		return fmt.Errorf("store: refund volume %s: %w", r.logKey(k), err)
	}
	return nil
}

// endBlockScript removes ARGV[1]'s block if its reason is ARGV[2]
// (lua/end_block.lua).
var endBlockScript = script("end_block")

// EndBlock removes the number's block if it is for reason (endBlockScript).
func (r *Blocks) EndBlock(ctx context.Context, phone string, reason problem.Code) error {
	if err := endBlockScript.Run(ctx, r.rdb, r.blockKeys(phone), phone, string(reason)).Err(); err != nil {
		return fmt.Errorf("store: end block: %w", err)
	}
	return nil
}

// ListBlocks returns the first n live blocks whose phone passes match,
// most recently begun first, and how many pass in all (see
// ops.BlockIndex). With a match it reads at most maxBlockScan numbers.
func (r *Blocks) ListBlocks(ctx context.Context, match func(phone string) bool, n int) ([]ops.BlockedNumber, int, error) {
	want := n
	if match != nil {
		want = maxBlockScan
	}
	if want <= 0 {
		return []ops.BlockedNumber{}, 0, nil
	}
	keys := r.blockKeys("")
	v, err := listBlocksScript.Run(ctx, r.rdb, keys[:2], want).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("store: list blocks: %w", err)
	}
	if len(v) == 0 {
		return nil, 0, fmt.Errorf("store: list blocks: empty reply")
	}
	total, ok := v[0].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("store: list blocks: unexpected count %T", v[0])
	}
	var phones []string
	if match != nil {
		total = 0
	}
	for _, x := range v[1:] {
		p, ok := x.(string)
		if !ok {
			return nil, 0, fmt.Errorf("store: list blocks: unexpected member %T", x)
		}
		if match == nil {
			phones = append(phones, p)
			continue
		}
		if match(p) {
			total++
			if len(phones) < n {
				phones = append(phones, p)
			}
		}
	}
	blocks, err := r.readBlocks(ctx, phones)
	if err != nil {
		return nil, 0, err
	}
	// A block may end between the two reads: it is no longer blocked.
	return blocks, int(total) - (len(phones) - len(blocks)), nil
}

// readBlocks reads the hashes of phones in one round trip, skipping those
// that have expired.
func (r *Blocks) readBlocks(ctx context.Context, phones []string) ([]ops.BlockedNumber, error) {
	out := make([]ops.BlockedNumber, 0, len(phones))
	if len(phones) == 0 {
		return out, nil
	}
	pipe := r.rdb.TxPipeline()
	cmds := make([]*redis.MapStringStringCmd, len(phones))
	for i, p := range phones {
		cmds[i] = pipe.HGetAll(ctx, r.blockKeys(p)[2])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("store: read blocks: %w", err)
	}
	for i, c := range cmds {
		h := c.Val()
		if len(h) == 0 {
			continue
		}
		count, err1 := strconv.ParseInt(h["count"], 10, 64)
		until, err2 := strconv.ParseInt(h["until"], 10, 64)
		since, err3 := strconv.ParseInt(h["since"], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			// The key names the number: mask it, this may reach a log.
			return nil, fmt.Errorf("store: read block of %s: malformed hash", guard.MaskPhone(phones[i]))
		}
		out = append(out, ops.BlockedNumber{
			Block: guard.Block{Phone: phones[i], Country: h["country"], Reason: problem.Code(h["reason"]),
				Count: count, Until: time.UnixMilli(until).UTC()},
			Since: time.UnixMilli(since).UTC(),
		})
	}
	return out, nil
}

// Unblock deletes the number's counters, the default service's code and
// each of services' (each service keeps its own code and lock) and its
// index entry, in one MULTI (on Redis Cluster, one per slot,
// concurrently: the number's keys and the index live in two or more).
func (r *Blocks) Unblock(ctx context.Context, phone string, counters []limit.Key, services ...string) error {
	del := make([]string, 0, len(counters)+1+len(services))
	for _, k := range counters {
		del = append(del, r.key(k))
	}
	del = append(del, r.codes.codeKey(phone, guard.DefaultService))
	for _, s := range services {
		if s != guard.DefaultService {
			del = append(del, r.codes.codeKey(phone, s))
		}
	}
	idx := r.blockKeys(phone)
	if r.cluster {
		return r.unblockBySlot(ctx, phone, del, idx)
	}
	pipe := r.rdb.TxPipeline()
	pipe.Del(ctx, del...)
	pipe.ZRem(ctx, idx[0], phone)
	pipe.ZRem(ctx, idx[1], phone)
	pipe.Del(ctx, idx[2])
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: unblock: %w", err)
	}
	return nil
}

// unblockBySlot is Unblock on Redis Cluster: a DEL per slot of the
// number's keys, and the index entry in the index's slot, concurrently.
func (r *Blocks) unblockBySlot(ctx context.Context, phone string, del, idx []string) error {
	keys := append(append([]string(nil), del...), idx[0])
	_, err := bySlot(ctx, keys, func(k string) string { return k }, func(ctx context.Context, part []string) ([]struct{}, error) {
		pipe := r.rdb.TxPipeline()
		for _, k := range part {
			if k == idx[0] {
				pipe.ZRem(ctx, idx[0], phone)
				pipe.ZRem(ctx, idx[1], phone)
				pipe.Del(ctx, idx[2])
			} else {
				pipe.Del(ctx, k)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("store: unblock: %w", err)
		}
		return make([]struct{}, len(part)), nil
	})
	return err
}
