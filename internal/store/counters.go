package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Counters keeps the limits' counters: fixed windows and token buckets,
// each a key of its own (a MULTI of INCRBY + PEXPIRE NX, or one script),
// and the /limits/check limits, fields of time-slice hashes (limits.go).
// The Fallback decides through its Take, Refund and TakeSend (an OTP
// send's round trip, send.go); the hot keys sync through Sync (sync.go).
type Counters struct {
	keyspace
	limits *limitHashes
	sends  *sends
	// coalescer carries rdb's single commands, nil when none does
	// (WithCoalescer, TakeAbandons).
	coalescer *Coalescer
}

var (
	_ limit.Counter     = (*Counters)(nil)
	_ guard.SendCounter = (*Counters)(nil)
)

// TakeAbandons reports whether Take(ctx, takes) returns as soon as ctx is
// cancelled, leaving the store call to go on without it. This is where
// the Fallback learns it may wait for a call on its caller's goroutine
// (resilience.Abandoner): true only when every command Take sends for
// takes is one script call (or a few, one after another) through a
// running Coalescer, which honours cancellation while queued and on the
// wire. That is the /limits/check path (limits.go) and the takes scripts
// decide alone (takeScripted), on one node or per slot (bySlot's parts
// each return at once).
//
// Everything else must not be abandoned there: a MULTI/EXEC (the OTP
// send counters) is never coalesced, and go-redis, once a command or a
// transaction is written, reads its reply until the context's deadline or
// the read timeout whatever a cancellation says (pool.Conn.WithReader
// sets only a deadline); so is a call without a Coalescer, or after its
// stop. Those stay on the Fallback's worker, which can stop waiting while
// the call goes on.
func (r *Counters) TakeAbandons(takes []limit.Take) bool {
	if !r.coalescer.Abandons() {
		return false
	}
	limits, err := allLimits(takes)
	return err != nil || limits || allScripted(takes)
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
func (r *Counters) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if r.cluster {
		return bySlot(ctx, takes, r.takeKey, r.take)
	}
	return r.take(ctx, takes)
}

func (r *Counters) take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if limits, err := allLimits(takes); err != nil || limits {
		if err != nil {
			return nil, err
		}
		return r.limits.take(ctx, takes)
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
func (r *Counters) queueTakes(ctx context.Context, pipe redis.Pipeliner, takes []limit.Take) ([][]redis.Cmder, error) {
	cmds := make([][]redis.Cmder, len(takes))
	for i, t := range takes {
		key := r.key(t.Key)
		switch {
		case t.Hold:
			return nil, fmt.Errorf("store: take %s: a held take must be decided by a script alone (token bucket, or fixed window with SpendIfAllowed), not in a batch with a counting window", r.logKey(t.Key))
		case t.Algorithm == limit.FixedWindow && t.Slice > 0 && (t.Cost == 0 || t.SpendIfAllowed):
			return nil, fmt.Errorf("store: take %s: a sliding window counts every hit: no peek, no spend-if-allowed", r.logKey(t.Key))
		case t.Algorithm == limit.FixedWindow && t.Slice > 0:
			cmds[i] = []redis.Cmder{slidingScript.EvalSha(ctx, pipe, []string{key}, slidingArgs(t)...)}
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
func (r *Counters) readTakes(ctx context.Context, takes []limit.Take, cmds [][]redis.Cmder) ([]limit.Result, error) {
	res := make([]limit.Result, len(takes))
	var err error
	for i, t := range takes {
		switch {
		case t.Algorithm == limit.TokenBucket:
			res[i], err = r.bucketResult(ctx, t, cmds[i][0].(*redis.Cmd))
		case t.Slice > 0:
			res[i], err = r.slidingResult(ctx, t, cmds[i][0].(*redis.Cmd))
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
func (r *Counters) windowTakeResult(ctx context.Context, t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
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

func (r *Counters) bucketResult(ctx context.Context, t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
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
func (r *Counters) Refund(ctx context.Context, takes []limit.Take) error {
	if r.cluster {
		_, err := bySlot(ctx, takes, r.takeKey, func(ctx context.Context, part []limit.Take) ([]struct{}, error) {
			return make([]struct{}, len(part)), r.refund(ctx, part)
		})
		return err
	}
	return r.refund(ctx, takes)
}

func (r *Counters) refund(ctx context.Context, takes []limit.Take) error {
	if limits, err := allLimits(takes); err != nil || limits {
		if err != nil {
			return err
		}
		return r.limits.refund(ctx, takes)
	}
	if len(takes) == 1 { // one script is atomic alone: no MULTI around it
		t, key := takes[0], []string{r.key(takes[0].Key)}
		err := refundScript(t).Run(ctx, r.rdb, key, refundArgs(t)...).Err()
		if err != nil {
			return fmt.Errorf("store: refund %s: %w", r.logKey(t.Key), err)
		}
		return nil
	}
	pipe := r.rdb.TxPipeline()
	for _, t := range takes {
		key := []string{r.key(t.Key)}
		refundScript(t).EvalSha(ctx, pipe, key, refundArgs(t)...)
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
		err = refundScript(t).Run(ctx, r.rdb, key, refundArgs(t)...).Err()
		if err != nil {
			return fmt.Errorf("store: refund %s: %w", r.logKey(t.Key), err)
		}
	}
	return nil
}

// refundScript is the script that gives back what t spent: a token
// bucket's, a sliding window's (by its slice) or a fixed window's (by its
// window), with its arguments refundArgs.
func refundScript(t limit.Take) *redis.Script {
	switch {
	case t.Algorithm == limit.TokenBucket:
		return tokenRefundScript
	case t.Slice > 0:
		return slidingRefundScript
	}
	return windowRefundScript
}

func refundArgs(t limit.Take) []any {
	if t.Algorithm == limit.TokenBucket {
		return []any{interval(t.Rate), t.Cost}
	}
	return []any{t.Cost, t.WindowID}
}

// TakeSend takes the limits of takes and, when vol is not nil, the
// velocity count, in one round trip (on Cluster one per hash slot, in
// order, stopping at a refusal; send.go).
func (r *Counters) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	return r.sends.take(ctx, takes, vol)
}

// takeKey is what decides t's Cluster slot (slotKey).
func (r *Counters) takeKey(t limit.Take) string { return r.slotKey(t.Key) }

// slotKey is what decides k's Cluster slot: its key, or for a limit the
// hash tag of its hashes (limits.go).
func (r *Counters) slotKey(k limit.Key) string {
	if isLimit(k) {
		return r.limits.tag(k)
	}
	return r.key(k)
}

// Master names the node that holds k on Redis Cluster: the address of its
// slot's master in the client's cached slot map (no round trip once the
// map is loaded). It is "" off a cluster, or while no map can be read.
// The Fallback keeps a breaker per name (resilience.FallbackOptions.NodeOf).
func (r *Counters) Master(k limit.Key) string {
	c, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := c.MasterForKey(context.Background(), r.slotKey(k))
	if err != nil {
		return ""
	}
	return m.Options().Addr
}
