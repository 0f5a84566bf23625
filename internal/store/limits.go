package store

import (
	"context"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The /limits/check limits (keys without a Name, limit.PolicyKey) live many
// to a Redis key: each limit is a field of a time-slice hash named by its
// policy, a slice of time and a shard of its id (lua/lib/limit.lua keeps
// them; docs/scaling.md, "Where the keys live"). A key and a TTL per
// limit cost Redis two dict entries and their table slots; a field of a
// small hash (a listpack) costs its name and a few bytes of value, and the
// hash's own cost is shared by the fields of its shard.
//
//	og:l:api:29049123{1234}  field user:42  value 41977512
//	     |   |        |            |              bucket: TAT, µs after the slice's start
//	  policy slice    shard        the id (limitID)
//
// A slice is one limit's longest life L (a window; a bucket's time from
// empty to full), at least minSlice. A lookup reads the current slice and
// the one before; a hash expires at the end of the slice after its own,
// so what nobody touches again is gone within 2L. Slices are counted on
// Redis's clock: the store names them by its own clock plus the skew it
// last saw, and a script that finds Redis's clock in another slice writes
// nothing and says so, and the store names them again (limitRetries).
//
// Every user of a limit goes through here: Take (the checks, peeks and
// held takes, the Envoy rules' counting windows), Refund and Sync.

// DefaultLimitShards is the shards per policy and slice when
// WithLimitShards is not called: 200,000 active limits of one policy are
// about 49 to a hash, well under hash-max-listpack-entries (128), so that
// every hash stays a listpack.
const DefaultLimitShards = 4096

// minSlice is the shortest slice: a limit whose life is shorter (a bucket
// of 10 tokens at 1,000/s) still keeps its field a second, so that a
// check near a slice's end rarely finds Redis's clock in the next one.
const minSlice = time.Second

// limitRetries bounds how many times a call is named again when Redis's
// clock puts it in another slice: once nearly always (the skew is learnt
// from the reply), twice if the slice ends in between.
const limitRetries = 3

// limitHashes keeps the /limits/check limits in their time-slice hashes.
type limitHashes struct {
	keyspace
	// shards is the shards per policy and slice (WithLimitShards).
	shards uint32
	// skew is Redis's clock less this host's, in ms, as last seen by a
	// limits script (runLimits): it names the slices.
	skew atomic.Int64
	// clock is this host's clock in ms; nil is time.Now. Tests that drive
	// Redis's clock hold it still with it (SetClockForTest), so that a
	// slow step on a loaded machine does not move the store's estimate.
	clock func() int64
}

// isLimit reports whether k is a /limits/check limit (no Name).
func isLimit(k limit.Key) bool { return k.Name == "" }

// allLimits reports whether every take is a limit, and refuses a mix of
// limits and named counters in one call: they are kept differently and no
// caller mixes them.
func allLimits(takes []limit.Take) (bool, error) {
	n := 0
	for _, t := range takes {
		if isLimit(t.Key) {
			n++
		}
	}
	if n != 0 && n != len(takes) {
		return false, fmt.Errorf("store: take: %d of %d takes are /limits/check limits: a call holds limits or named counters, not both", n, len(takes))
	}
	return n > 0, nil
}

// sliceLen is a take's slice length in ms: its window, or its bucket's
// time from empty to full (with the half µs a rounded TAT may run late),
// at least minSlice.
func sliceLen(t limit.Take) int64 {
	ms := t.Window.Milliseconds()
	if t.Algorithm == limit.TokenBucket {
		ms = int64(math.Ceil((float64(t.Limit)*interval(t.Rate) + 1) / 1000))
	}
	return max(ms, minSlice.Milliseconds())
}

// limitRef is where a limit lives now: its hashes of the current and the
// previous slice, its field, the slice length and index.
type limitRef struct {
	cur, prev, field string
	slice, idx       int64
}

// shard is the shard of a limit's field (its id, limitID).
func (r *limitHashes) shard(field string) uint32 { return shardOf(field, r.shards) }

// shardOf is crc32.ChecksumIEEE(field) % shards, over the string itself:
// crc32's own functions take a []byte that escapes (they call through a
// function value), so converting a field cost an allocation per check.
func shardOf(field string, shards uint32) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(field); i++ {
		crc = crc32.IEEETable[byte(crc)^field[i]] ^ crc>>8
	}
	return ^crc % shards
}

// tag is the hash tag of a limit's hashes, which decides its Cluster
// slot: "{" + shard + "}". Every policy's hashes of one caller key share
// it: the checks of one key are one slot.
func (r *limitHashes) tag(k limit.Key) string {
	return "{" + strconv.FormatUint(uint64(r.shard(limitID(k.ID))), 10) + "}"
}

// LimitHashTag is the hash tag of the hashes that hold the limits of a
// caller key (any policy) with shards shards per policy and slice: what
// decides their Redis Cluster slot, for tools and tests that need to know
// which master holds a limit.
func LimitHashTag(key string, shards int) string {
	return "{" + strconv.FormatUint(uint64(shardOf(limitID(key), uint32(shards))), 10) + "}"
}

// limitRef names t's hashes for the slice that nowMs (the store's estimate
// of Redis's clock) falls in.
func (r *limitHashes) limitRef(t limit.Take, nowMs int64) limitRef {
	field := limitID(t.Key.ID)
	slice := sliceLen(t)
	idx := nowMs / slice
	b, at := r.appendLimitKeys(nil, t.Key.Space, field, idx)
	keys := string(b)
	return limitRef{cur: keys[:at], prev: keys[at:], field: field, slice: slice, idx: idx}
}

// appendLimitKeys appends to b the names of the hashes of field in space
// for slice idx and the one before, prefix + space + ":" + idx + "{" +
// shard + "}" each, and returns b and where the second begins.
func (r *limitHashes) appendLimitKeys(b []byte, space, field string, idx int64) (_ []byte, at int) {
	shard := uint64(r.shard(field))
	for i := range 2 {
		b = append(b, r.prefix...)
		b = append(b, space...)
		b = append(b, ':')
		b = strconv.AppendInt(b, idx-int64(i), 10)
		b = append(b, '{')
		b = strconv.AppendUint(b, shard, 10)
		b = append(b, '}')
		if i == 0 {
			at = len(b)
		}
	}
	return b, at
}

// redisNowMs is the store's estimate of Redis's clock, in ms.
func (r *limitHashes) redisNowMs() int64 { return r.hostNowMs() + r.skew.Load() }

// hostNowMs is this host's clock, in ms.
func (r *limitHashes) hostNowMs() int64 {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now().UnixMilli()
}

// runLimits runs a limits script built by build (for Redis's clock at
// nowMs) until Redis's clock agrees with the slices it names: a reply of
// {-1, -1, now µs} wrote nothing, and teaches the store the skew. The
// reply's numbers go into dst's memory when it has room.
func (r *limitHashes) runLimits(ctx context.Context, s hotScript, build func(nowMs int64) []any, dst []int64) ([]int64, error) {
	for range limitRetries {
		v, err := int64s(s.run(ctx, r.rdb, build(r.redisNowMs())), dst)
		if err != nil {
			return nil, err
		}
		// Three values: no reply of a take (five per take), a refund (one)
		// or a sync (two per item, a bucket's remaining may be -1) has as
		// many.
		if len(v) == 3 && v[0] == -1 && v[1] == -1 {
			r.skew.Store(v[2]/1000 - r.hostNowMs())
			continue
		}
		return v, nil
	}
	return nil, fmt.Errorf("the Redis clock left the slice %d times in a row", limitRetries)
}

// take decides takes, all limits (and on Redis Cluster all of one
// slot), in one call of takeLimitsScript: take_many's decisions on the
// time-slice hashes.
//
// A single take that spends goes to takeLimitScript, the same decision
// without a batch's bookkeeping.
func (r *limitHashes) take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	s, one := takeLimitsScript, len(takes) == 1 && takes[0].Cost > 0 && !takes[0].Hold
	if one {
		s = takeLimitScript
	}
	var buf [10]int64 // the reply of up to two takes
	v, err := r.runLimits(ctx, s, func(nowMs int64) []any {
		args, vals := r.limitArgs(s, takes, nowMs, 8*len(takes)+1)
		all := len(args)
		if !one {
			args = append(args, 1)
		}
		for i, t := range takes {
			if !one && !t.AllOrNothing {
				args[all] = 0
			}
			flags := manyFlags(t)
			if t.Algorithm != limit.TokenBucket && !t.SpendIfAllowed {
				flags |= manyCount // a window that counts every hit, as hitWindow
			}
			v := &vals[i]
			args = append(args, kind(t), flags, &v.limit, v.param(t), &v.cost, &v.slice, &v.idx, &v.field)
		}
		return args
	}, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("store: take %d limits: %w", len(takes), err)
	}
	return manyResults(takes, v)
}

// refund gives back what take spent (refundLimitsScript).
func (r *limitHashes) refund(ctx context.Context, takes []limit.Take) error {
	var buf [3]int64
	_, err := r.runLimits(ctx, refundLimitsScript, func(nowMs int64) []any {
		args, vals := r.limitArgs(refundLimitsScript, takes, nowMs, 6*len(takes))
		for i, t := range takes {
			v := &vals[i]
			args = append(args, kind(t), v.param(t), &v.cost, &v.slice, &v.idx, &v.field)
		}
		return args
	}, buf[:0])
	if err != nil {
		return fmt.Errorf("store: refund %d limits: %w", len(takes), err)
	}
	return nil
}

// sync is Sync for items that are all limits (syncLimitsScript).
func (r *limitHashes) sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	takes := make([]limit.Take, len(items))
	for i, it := range items {
		takes[i] = it.Take
	}
	v, err := r.runLimits(ctx, syncLimitsScript, func(nowMs int64) []any {
		args, vals := r.limitArgs(syncLimitsScript, takes, nowMs, 7*len(items))
		for i, it := range items {
			v := &vals[i]
			v.delta = it.Delta
			args = append(args, kind(it.Take), &v.limit, v.param(it.Take), &v.delta, &v.slice, &v.idx, &v.field)
		}
		return args
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("store: sync %d limits: %w", len(items), err)
	}
	if len(v) != 2*len(items) {
		return nil, fmt.Errorf("store: sync: script returned %d values for %d items, want %d", len(v), len(items), 2*len(items))
	}
	out := make([]limit.SyncState, len(items))
	for i, it := range items {
		if it.Algorithm == limit.TokenBucket { // {remaining, reset_after µs}
			remaining, resetAfter := v[2*i], v[2*i+1]
			out[i] = limit.SyncState{Remaining: remaining, ResetAfter: time.Duration(resetAfter) * time.Microsecond}
			continue
		}
		count, left := v[2*i], v[2*i+1] // {count, left ms}
		res := fixedWindowResult(it.Take, count, time.Duration(left)*time.Millisecond)
		out[i] = limit.SyncState{Remaining: it.Limit - res.Count, ResetAfter: res.ResetAfter}
	}
	return out, nil
}

// takeLimitsScript decides limits on the time-slice hashes
// (lua/take_limits.lua).
var takeLimitsScript = newHotScript(script("take_limits"))

// takeLimitScript is takeLimitsScript for one take that spends
// (lua/take_limit.lua).
var takeLimitScript = newHotScript(script("take_limit"))

// takeLimitsManyScript runs the take_limit and take_limits calls of one
// coalesced pipeline as one call (lua/take_limits_many.lua, merge.go).
var takeLimitsManyScript = newHotScript(script("take_limits_many"))

// The /limits/check calls of concurrent requests are joined by
// takeLimitsManyScript (tags as its ARGV names them); take_limit calls in
// a row that differ only in their field (one policy's checks) go as one
// run (limitRun).
var _ = joinCalls(takeLimitsManyScript, map[string]hotScript{"1": takeLimitScript, "2": takeLimitsScript},
	map[string]runForm{"1": limitRun})

// limitRun is how a run of take_limit calls goes: a fixed window's as tag
// 4 with each call's cur hash only (its window_run names prev itself, for
// the few checks that read it: one key fewer to send and to make a Lua
// string of, per check), a bucket's as tag 3 with both hashes.
func limitRun(args []any) (tag string, keys int) {
	if k, _ := args[3+args[2].(int)].(int); k == 1 {
		return "4", 1
	}
	return "3", 2
}

// refundLimitsScript gives back what takeLimitsScript spent
// (lua/refund_limits.lua).
var refundLimitsScript = newHotScript(script("refund_limits"))

// syncLimitsScript is hot keys' sync on the time-slice hashes
// (lua/sync_limits.lua).
var syncLimitsScript = newHotScript(script("sync_limits"))
