// Package store is the shared Redis: the limits' counters and buckets, the
// codes and their verifications, the heartbeat, the block index and the
// attack view's counters, each decided by one MULTI or one Lua script
// (lua/). It implements guard's and ops' interfaces for them. The SQL ops
// database is package sqlstore.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// rediser is what Redis needs of a go-redis client: a single node, a
// Cluster or a Sentinel-backed client all satisfy it.
type rediser interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error // hotScript.run
	TxPipeline() redis.Pipeliner
	Pipeline() redis.Pipeliner
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// Redis keeps counters, token buckets and codes in Redis.
type Redis struct {
	rdb    rediser
	prefix string
	// cluster splits batches per hash slot (NewClusterRedis).
	cluster bool
	// shards is the limits' shards per policy and slice (limits.go).
	shards uint32
	// skew is Redis's clock less this host's, in ms, as last seen by a
	// limits script (runLimits): it names the slices.
	skew atomic.Int64
	// coalescer carries rdb's single commands, nil when none does
	// (WithCoalescer, TakeAbandons).
	coalescer *Coalescer
}

// NewRedis returns a store over rdb whose keys all start with prefix
// (e.g. "og:"), so that several deployments or tests can share one server.
func NewRedis(rdb rediser, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, shards: DefaultLimitShards}
}

// key renders k as prefix + space + ":{" + id + "}:" + name. The braces are
// a hash tag: every counter of one subject lands in one Cluster slot.
//
// A key without a name is a /limits/check limit, which lives as a field
// of a time-slice hash (limits.go); key renders it prefix + space + "{" +
// id + "}" (og:l:api{user:42}) only for error texts (logKey), with an id
// longer than maxPlainID bytes replaced by its digest (limitID), as in
// the field.
func (r *Redis) key(k limit.Key) string {
	var b strings.Builder
	if k.Name == "" {
		id := limitID(k.ID)
		b.Grow(len(r.prefix) + len(k.Space) + len(id) + 2)
		b.WriteString(r.prefix)
		b.WriteString(k.Space)
		b.WriteByte('{')
		b.WriteString(id)
		b.WriteByte('}')
		return b.String()
	}
	b.Grow(len(r.prefix) + len(k.Space) + len(k.ID) + len(k.Name) + 4)
	b.WriteString(r.prefix)
	b.WriteString(k.Space)
	b.WriteString(":{")
	b.WriteString(k.ID)
	b.WriteString("}:")
	b.WriteString(k.Name)
	return b.String()
}

// maxPlainID is the longest caller key a limit's Redis key holds as it is.
const maxPlainID = 32

// limitID is id, or for an id longer than maxPlainID bytes "#" and the
// first 96 bits of its SHA-256 in unpadded base64url: 17 bytes whatever
// the key's length (up to limit.MaxKeyLength, 128), so a long caller key
// costs Redis no more than a short one. "#" is not a character a caller
// key may hold (limit.ValidateKey), so no plain key can look like a
// digest. Two long keys share a limit only if their digests collide: by
// chance, about once in 2^48 pairs of distinct keys; on purpose, it takes
// finding a SHA-256 collision on 96 bits for two keys of the caller's own,
// and a second preimage (2^96 work) to hit someone else's.
func limitID(id string) string {
	if len(id) <= maxPlainID {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// logKey is key(k) with its ID masked (guard.MaskPhone), for error texts:
// an ID is often a phone number, and these errors reach the logs.
func (r *Redis) logKey(k limit.Key) string {
	k.ID = guard.MaskPhone(k.ID)
	return r.key(k)
}

// LoadScripts loads every script of luaScripts into the server's cache,
// so the first request does not pay for an EVAL.
func (r *Redis) LoadScripts(ctx context.Context) error {
	for _, name := range scriptNames() {
		if err := luaScripts[name].script.Load(ctx, r.rdb).Err(); err != nil {
			return fmt.Errorf("store: load script %s: %w", name, err)
		}
	}
	return nil
}

// Take spends from every counter of takes in one round trip. Takes that
// scripts decide alone (token buckets, fixed windows with SpendIfAllowed:
// every /limits/check) are one script call, no MULTI (takeScripted,
// batch.go). Otherwise one MULTI/EXEC holding, per fixed window, INCRBY +
// PEXPIRE NX + PTTL (GET + PTTL for a peek, cost 0; windowTakeScript when
// the take spends only if allowed) and, per token bucket, an EVALSHA of
// tokenBucketScript. On Redis Cluster, one call per hash slot, sent
// concurrently (bySlot, slot.go).
//
// The fixed window is the design's rule: INCRBY counts, PEXPIRE ... NX starts
// the window at the first hit and lets no later hit push it back, and both
// sit in one MULTI so that no counter ever lives without a TTL. Never
// GET-then-SET, never INCR then a separate EXPIRE.
func (r *Redis) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if r.cluster {
		return bySlot(ctx, takes, r.takeKey, r.take)
	}
	return r.take(ctx, takes)
}

func (r *Redis) take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if limits, err := allLimits(takes); err != nil || limits {
		if err != nil {
			return nil, err
		}
		return r.takeLimits(ctx, takes)
	}
	if allScripted(takes) {
		return r.takeScripted(ctx, takes)
	}
	pipe := r.rdb.TxPipeline()
	cmds, err := r.queueTakes(ctx, pipe, takes)
	if err != nil {
		return nil, err
	}
	// Exec reports the first command's error. A peek's GET of a missing key
	// (redis.Nil) and a NOSCRIPT are single replies, not a failed round trip:
	// each command's own reply is checked below.
	_, err = pipe.Exec(ctx)
	if err != nil && !isNoScript(err) && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: take: %w", err)
	}
	return r.readTakes(ctx, takes, cmds)
}

// queueTakes queues the commands of takes in pipe (a MULTI): per fixed
// window INCRBY + PEXPIRE NX + PTTL (GET + PTTL for a peek, cost 0;
// windowTakeScript when the take spends only if allowed), per token bucket
// an EVALSHA of tokenBucketScript.
func (r *Redis) queueTakes(ctx context.Context, pipe redis.Pipeliner, takes []limit.Take) ([][]redis.Cmder, error) {
	cmds := make([][]redis.Cmder, len(takes))
	for i, t := range takes {
		key := r.key(t.Key)
		switch {
		case t.Hold:
			return nil, fmt.Errorf("store: take %s: a held take must be decided by a script alone (token bucket, or fixed window with SpendIfAllowed), not in a batch with a counting window", r.logKey(t.Key))
		case t.Algorithm == limit.FixedWindow && t.Cost == 0:
			cmds[i] = peekWindow(ctx, pipe, key)
		case t.Algorithm == limit.FixedWindow && t.SpendIfAllowed:
			cmds[i] = []redis.Cmder{windowTakeScript.EvalSha(ctx, pipe, []string{key}, t.Cost, t.Limit, t.Window.Milliseconds())}
		case t.Algorithm == limit.FixedWindow:
			cmds[i] = hitWindow(ctx, pipe, key, t.Cost, t.Window)
		case t.Algorithm == limit.TokenBucket:
			cmds[i] = []redis.Cmder{tokenBucketScript.EvalSha(ctx, pipe, []string{key}, t.Limit, interval(t.Rate), t.Cost)}
		default:
			return nil, fmt.Errorf("store: take %s: unknown algorithm %q", r.logKey(t.Key), t.Algorithm)
		}
	}
	return cmds, nil
}

// readTakes reads the replies queueTakes queued, once the MULTI ran.
func (r *Redis) readTakes(ctx context.Context, takes []limit.Take, cmds [][]redis.Cmder) ([]limit.Result, error) {
	res := make([]limit.Result, len(takes))
	var err error
	for i, t := range takes {
		switch {
		case t.Algorithm == limit.TokenBucket:
			res[i], err = r.bucketResult(ctx, t, cmds[i][0].(*redis.Cmd))
		case t.Cost == 0:
			res[i], err = peekResult(t, cmds[i])
		case t.SpendIfAllowed:
			res[i], err = r.windowTakeResult(ctx, t, cmds[i][0].(*redis.Cmd))
		default:
			res[i], err = windowResult(t, cmds[i])
		}
		if err != nil {
			return nil, fmt.Errorf("store: take %s: %w", r.logKey(t.Key), err)
		}
	}
	return res, nil
}

// hitWindow queues one fixed-window hit of n in a MULTI: INCRBY counts,
// PEXPIRE ... NX starts the window at the first hit and lets no later hit
// push it back, PTTL says how much of it is left, and PEXPIRETIME names
// the window (its end on Redis's clock: never moved within a window, and
// a window started after it ends later), so that a refund can give back
// in the window it counted in and nowhere else (lua/refund_window.lua).
func hitWindow(ctx context.Context, pipe redis.Pipeliner, key string, n int64, window time.Duration) []redis.Cmder {
	return []redis.Cmder{
		pipe.IncrBy(ctx, key, n),
		pipe.Do(ctx, "pexpire", key, window.Milliseconds(), "nx"),
		pipe.PTTL(ctx, key),
		pipe.Do(ctx, "pexpiretime", key),
	}
}

// peekWindow queues a read of a fixed window for a cost-0 take: GET and
// PTTL, never a write. INCRBY 0 + PEXPIRE NX would create a missing key and
// start its window at the peek, so that the first real hit would get less
// than a full window.
func peekWindow(ctx context.Context, pipe redis.Pipeliner, key string) []redis.Cmder {
	return []redis.Cmder{pipe.Get(ctx, key), pipe.PTTL(ctx, key)}
}

func windowResult(t limit.Take, cmds []redis.Cmder) (limit.Result, error) {
	for _, c := range cmds {
		if c.Err() != nil {
			return limit.Result{}, c.Err()
		}
	}
	count := cmds[0].(*redis.IntCmd).Val()
	res := fixedWindowResult(t, count, cmds[2].(*redis.DurationCmd).Val())
	end, err := cmds[3].(*redis.Cmd).Int64()
	if err != nil {
		return limit.Result{}, fmt.Errorf("pexpiretime: %w", err)
	}
	if end > 0 { // -1 (no TTL) and -2 (no key) name no window
		res.WindowID = end
	}
	return res, nil
}

// peekResult reads peekWindow's replies: a missing key is an untouched
// window, count 0 with all of it ahead.
func peekResult(t limit.Take, cmds []redis.Cmder) (limit.Result, error) {
	count, err := cmds[0].(*redis.StringCmd).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		count = 0
	case err != nil:
		return limit.Result{}, err
	}
	ttl, err := cmds[1].(*redis.DurationCmd).Result()
	if err != nil {
		return limit.Result{}, err
	}
	return fixedWindowResult(t, count, ttl), nil
}

// fixedWindowResult is the Result of a window holding count with ttl to
// run. A negative ttl (-2: no key, the peek of a fresh window; -1: no TTL,
// which the MULTI never leaves) reads as the whole window.
func fixedWindowResult(t limit.Take, count int64, ttl time.Duration) limit.Result {
	if ttl < 0 {
		ttl = t.Window
	}
	res := limit.Result{
		Allowed:    count <= t.Limit,
		Limit:      t.Limit,
		Count:      count,
		Remaining:  max(0, t.Limit-count),
		ResetAfter: ttl,
		Spent:      t.Cost > 0,
	}
	if !res.Allowed {
		res.RetryAfter = ttl
	}
	return res
}

// windowTakeResult reads windowTakeScript's reply: Spent only when it
// allowed.
func (r *Redis) windowTakeResult(ctx context.Context, t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
	if isNoScript(cmd.Err()) { // as in bucketResult: it did not run, so run it
		cmd = windowTakeScript.Run(ctx, r.rdb, []string{r.key(t.Key)}, t.Cost, t.Limit, t.Window.Milliseconds())
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return limit.Result{}, err
	}
	if len(v) != 3 {
		return limit.Result{}, fmt.Errorf("window script returned %d values, want 3", len(v))
	}
	res := fixedWindowResult(t, v[1], time.Duration(v[2])*time.Millisecond)
	res.Allowed, res.Spent = v[0] == 1, v[0] == 1
	if res.Allowed {
		res.RetryAfter = 0
	} else {
		res.RetryAfter = res.ResetAfter
	}
	return res, nil
}

func (r *Redis) bucketResult(ctx context.Context, t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
	if isNoScript(cmd.Err()) {
		// The server lost its script cache (restart, SCRIPT FLUSH). The
		// script did not run, so running it again counts once: EVAL it,
		// which also puts it back in the cache.
		cmd = tokenBucketScript.Run(ctx, r.rdb, []string{r.key(t.Key)}, t.Limit, interval(t.Rate), t.Cost)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return limit.Result{}, err
	}
	if len(v) != 4 {
		return limit.Result{}, fmt.Errorf("token bucket script returned %d values, want 4", len(v))
	}
	allowed := v[0] == 1
	return limit.Result{
		Allowed:    allowed,
		Limit:      t.Limit,
		Remaining:  v[1],
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
		Spent:      allowed && t.Cost > 0,
	}, nil
}

// Refund gives back what Take spent, one script per counter, all in one
// round trip (one per hash slot on Redis Cluster; a MULTI, so the
// counters of one slot change together). The scripts never create a key,
// and a fixed window named by its Result's WindowID is given back only
// while that window runs.
func (r *Redis) Refund(ctx context.Context, takes []limit.Take) error {
	if r.cluster {
		_, err := bySlot(ctx, takes, r.takeKey, func(ctx context.Context, part []limit.Take) ([]struct{}, error) {
			return make([]struct{}, len(part)), r.refund(ctx, part)
		})
		return err
	}
	return r.refund(ctx, takes)
}

func (r *Redis) refund(ctx context.Context, takes []limit.Take) error {
	if limits, err := allLimits(takes); err != nil || limits {
		if err != nil {
			return err
		}
		return r.refundLimits(ctx, takes)
	}
	if len(takes) == 1 { // one script is atomic alone: no MULTI around it
		t, key := takes[0], []string{r.key(takes[0].Key)}
		var err error
		if t.Algorithm == limit.TokenBucket {
			err = tokenRefundScript.Run(ctx, r.rdb, key, interval(t.Rate), t.Cost).Err()
		} else {
			err = windowRefundScript.Run(ctx, r.rdb, key, t.Cost, t.WindowID).Err()
		}
		if err != nil {
			return fmt.Errorf("store: refund %s: %w", r.logKey(t.Key), err)
		}
		return nil
	}
	pipe := r.rdb.TxPipeline()
	for _, t := range takes {
		key := []string{r.key(t.Key)}
		if t.Algorithm == limit.TokenBucket {
			tokenRefundScript.EvalSha(ctx, pipe, key, interval(t.Rate), t.Cost)
		} else {
			windowRefundScript.EvalSha(ctx, pipe, key, t.Cost, t.WindowID)
		}
	}
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	if !isNoScript(err) {
		return fmt.Errorf("store: refund: %w", err)
	}
	for i, c := range cmds { // the NOSCRIPT ones did not run: run them now
		if !isNoScript(c.Err()) {
			continue
		}
		t, key := takes[i], []string{r.key(takes[i].Key)}
		if t.Algorithm == limit.TokenBucket {
			err = tokenRefundScript.Run(ctx, r.rdb, key, interval(t.Rate), t.Cost).Err()
		} else {
			err = windowRefundScript.Run(ctx, r.rdb, key, t.Cost, t.WindowID).Err()
		}
		if err != nil {
			return fmt.Errorf("store: refund %s: %w", r.logKey(t.Key), err)
		}
	}
	return nil
}

// interval is the microseconds one token takes to refill.
func interval(ratePerSecond float64) float64 {
	return math.Round(1e6/ratePerSecond*1000) / 1000
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Cluster reports whether r is on Redis Cluster.
func (r *Redis) Cluster() bool { return r.cluster }
