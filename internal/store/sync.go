package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
)

// Sync adds what an instance counted on its own to each hot key and reads
// back the global state, all keys in one round trip (sync mode). A fixed
// window is the same MULTI as Take (INCRBY delta, PEXPIRE NX, PTTL): the
// delta lands in the current window, which it starts if there is none. A
// token bucket takes the delta through tokenSyncScript.
// On Redis Cluster, one MULTI/EXEC per hash slot, sent concurrently.
func (r *Redis) Sync(ctx context.Context, items []guard.SyncItem) ([]guard.SyncState, error) {
	if r.cluster {
		return bySlot(ctx, items, func(it guard.SyncItem) string { return r.key(it.Key) }, r.sync)
	}
	return r.sync(ctx, items)
}

func (r *Redis) sync(ctx context.Context, items []guard.SyncItem) ([]guard.SyncState, error) {
	pipe := r.rdb.TxPipeline()
	cmds := make([][]redis.Cmder, len(items))
	for i, it := range items {
		key := r.key(it.Key)
		switch it.Algorithm {
		case guard.FixedWindow:
			cmds[i] = hitWindow(ctx, pipe, key, it.Delta, it.Window)
		case guard.TokenBucket:
			cmds[i] = []redis.Cmder{tokenSyncScript.EvalSha(ctx, pipe, []string{key}, it.Limit, interval(it.Rate), it.Delta)}
		default:
			return nil, fmt.Errorf("store: sync %s: unknown algorithm %q", key, it.Algorithm)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return nil, fmt.Errorf("store: sync: %w", err)
	}
	out := make([]guard.SyncState, len(items))
	for i, it := range items {
		var err error
		if it.Algorithm == guard.FixedWindow {
			var res guard.Result
			res, err = windowResult(it.Take, cmds[i])
			out[i] = guard.SyncState{Remaining: it.Limit - res.Count, ResetAfter: res.ResetAfter}
		} else {
			out[i], err = r.bucketSync(ctx, it, cmds[i][0].(*redis.Cmd))
		}
		if err != nil {
			return nil, fmt.Errorf("store: sync %s: %w", r.key(it.Key), err)
		}
	}
	return out, nil
}

func (r *Redis) bucketSync(ctx context.Context, it guard.SyncItem, cmd *redis.Cmd) (guard.SyncState, error) {
	if isNoScript(cmd.Err()) { // did not run: running it now counts once
		cmd = tokenSyncScript.Run(ctx, r.rdb, []string{r.key(it.Key)}, it.Limit, interval(it.Rate), it.Delta)
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return guard.SyncState{}, err
	}
	if len(v) != 2 {
		return guard.SyncState{}, fmt.Errorf("token sync script returned %d values, want 2", len(v))
	}
	return guard.SyncState{Remaining: v[0], ResetAfter: time.Duration(v[1]) * time.Microsecond}, nil
}
