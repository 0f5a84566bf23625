package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// Sync adds what an instance counted on its own to each hot key and reads
// back the global state, all items in one round trip (sync mode; the
// caller, limit.HotKeys, keeps batches small). A fixed window is the same
// MULTI as Take (INCRBY delta, PEXPIRE NX, PTTL): the delta lands in the
// current window, which it starts if there is none. A token bucket takes
// the delta through tokenSyncScript.
//
// An item with a zero delta is only read (peekWindow's GET and PTTL, or
// the bucket script at cost 0, which writes nothing): an idle key must not
// start a window, or rewrite a bucket, that no hit started.
//
// On Redis Cluster, one MULTI/EXEC per hash slot, sent concurrently.
func (r *Counters) Sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	if r.cluster {
		return bySlot(ctx, items, func(it limit.SyncItem) string { return r.takeKey(it.Take) }, r.sync)
	}
	return r.sync(ctx, items)
}

func (r *Counters) sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	limits := 0
	for _, it := range items {
		if isLimit(it.Key) {
			limits++
		}
	}
	switch {
	case limits == len(items) && limits > 0:
		return r.limits.sync(ctx, items)
	case limits > 0:
		return nil, fmt.Errorf("store: sync: %d of %d items are /limits/check limits: a call holds limits or named counters, not both", limits, len(items))
	}
	pipe := r.rdb.TxPipeline()
	cmds := make([][]redis.Cmder, len(items))
	for i, it := range items {
		key := r.key(it.Key)
		switch {
		case it.Algorithm == limit.FixedWindow && it.Delta == 0:
			cmds[i] = peekWindow(ctx, pipe, key)
		case it.Algorithm == limit.FixedWindow:
			cmds[i] = hitWindow(ctx, pipe, key, it.Delta, it.Window)
		case it.Algorithm == limit.TokenBucket:
			cmds[i] = []redis.Cmder{bucketSyncScript(it).EvalSha(ctx, pipe, []string{key}, it.Limit, interval(it.Rate), it.Delta)}
		default:
			return nil, fmt.Errorf("store: sync %s: unknown algorithm %q", r.logKey(it.Key), it.Algorithm)
		}
	}
	// As in take: a read's redis.Nil and a NOSCRIPT are single replies, not
	// a failed round trip; each command's own reply is checked below.
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: sync: %w", err)
	}
	out := make([]limit.SyncState, len(items))
	for i, it := range items {
		var res limit.Result
		var err error
		switch {
		case it.Algorithm == limit.TokenBucket:
			out[i], err = r.bucketSync(ctx, it, cmds[i][0].(*redis.Cmd))
		case it.Delta == 0:
			res, err = peekResult(it.Take, cmds[i])
			out[i] = limit.SyncState{Remaining: it.Limit - res.Count, ResetAfter: res.ResetAfter}
		default:
			res, err = windowResult(it.Take, cmds[i])
			out[i] = limit.SyncState{Remaining: it.Limit - res.Count, ResetAfter: res.ResetAfter}
		}
		if err != nil {
			return nil, fmt.Errorf("store: sync %s: %w", r.logKey(it.Key), err)
		}
	}
	return out, nil
}

// bucketSyncScript is the script that syncs it: with nothing to add, the
// token bucket script at cost 0, which only reads (tokenSyncScript would
// rewrite the key).
func bucketSyncScript(it limit.SyncItem) *redis.Script {
	if it.Delta == 0 {
		return tokenBucketScript.Script
	}
	return tokenSyncScript
}

func (r *Counters) bucketSync(ctx context.Context, it limit.SyncItem, cmd *redis.Cmd) (limit.SyncState, error) {
	if isNoScript(cmd.Err()) { // did not run: running it now counts once
		cmd = bucketSyncScript(it).Run(ctx, r.rdb, []string{r.key(it.Key)}, it.Limit, interval(it.Rate), it.Delta)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return limit.SyncState{}, err
	}
	// tokenSyncScript: {remaining, reset_after_us}; tokenBucketScript:
	// {allowed, remaining, retry_after_us, reset_after_us}.
	remaining, reset := 0, 1
	if it.Delta == 0 {
		remaining, reset = 1, 3
	}
	if len(v) != reset+1 {
		return limit.SyncState{}, fmt.Errorf("token sync script returned %d values, want %d", len(v), reset+1)
	}
	return limit.SyncState{Remaining: v[remaining], ResetAfter: time.Duration(v[reset]) * time.Microsecond}, nil
}
