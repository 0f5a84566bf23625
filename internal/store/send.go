package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
)

// An OTP send's limits in one round trip (guard.OTP.spend). On a single
// Redis every limit and the country velocity rule's count go out in one
// MULTI/EXEC: each fixed window is its own INCRBY + PEXPIRE NX (the
// design's rule, never GET-then-SET), the velocity rule its own script
// (velocityScript), and the MULTI makes the lot one atomic step and one
// write. On Redis Cluster a MULTI may touch one hash slot only: one MULTI
// per slot (bySlot) and the velocity script, all sent at once.
//
// Nothing here decides whether the send goes on: every limit is counted
// whatever the others answer, and the caller refunds what a denied send
// must not keep (the counting rule, guard.OTP.spend).

var _ guard.SendCounter = (*Redis)(nil)

// TakeSend takes the limits of takes and, when vol is not nil, the
// velocity count, in one round trip (one per hash slot on Cluster, in
// parallel).
func (r *Redis) TakeSend(ctx context.Context, takes []guard.Take, vol *guard.VolumeTake) ([]guard.Result, *guard.VolumeResult, error) {
	if vol == nil {
		res, err := r.Take(ctx, takes)
		return res, nil, err
	}
	if r.cluster {
		return r.takeSendCluster(ctx, takes, vol)
	}
	pipe := r.rdb.TxPipeline()
	cmds, err := r.queueTakes(ctx, pipe, takes)
	if err != nil {
		return nil, nil, err
	}
	vkeys, vargs := r.volumeArgs(*vol)
	vcmd := velocityScript.EvalSha(ctx, pipe, vkeys, vargs...)
	// As in take: a NOSCRIPT or a peek's redis.Nil is one command's reply,
	// read below; any other error failed the round trip.
	_, err = pipe.Exec(ctx)
	if err != nil && !isNoScript(err) && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store: take send: %w", err)
	}
	res, err := r.readTakes(ctx, takes, cmds)
	if err != nil {
		return nil, nil, err
	}
	if isNoScript(vcmd.Err()) {
		// The server lost its script cache: the script did not run, so
		// running it again counts once (EVAL, which reloads the cache).
		vcmd = velocityScript.Run(ctx, r.rdb, vkeys, vargs...)
	}
	vres, err := r.volumeResult(*vol, vcmd)
	if err != nil {
		return nil, nil, err
	}
	return res, &vres, nil
}

// takeSendCluster sends the limits' MULTIs (one per slot) and the velocity
// script together and waits for all.
func (r *Redis) takeSendCluster(ctx context.Context, takes []guard.Take, vol *guard.VolumeTake) ([]guard.Result, *guard.VolumeResult, error) {
	var vres guard.VolumeResult
	var verr error
	var wg sync.WaitGroup
	wg.Go(func() { vres, verr = r.TakeVolume(ctx, *vol) })
	res, err := r.Take(ctx, takes)
	wg.Wait()
	if err := errors.Join(err, verr); err != nil {
		return nil, nil, err
	}
	return res, &vres, nil
}

// volumeArgs are velocityScript's keys and arguments for t.
func (r *Redis) volumeArgs(t guard.VolumeTake) ([]string, []any) {
	ttl := int64((time.Duration(t.Lookback+2) * time.Hour) / time.Second)
	return []string{r.key(t.Key), r.key(t.Quarantine)},
		[]any{t.Hour, t.Lookback, t.Floor, t.QFloor, t.Factor, t.MinConv, ttl, t.Now.Unix(), t.Now.Unix() / 60, t.MinuteShare}
}

// volumeResult reads velocityScript's reply.
func (r *Redis) volumeResult(t guard.VolumeTake, cmd *redis.Cmd) (guard.VolumeResult, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: %w", r.key(t.Key), err)
	}
	if len(v) != 6 {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: script returned %d values, want 6", r.key(t.Key), len(v))
	}
	return guard.VolumeResult{Allowed: v[0] == 1, Count: v[1], Limit: v[2], Baseline: v[3], Quarantined: v[4] == 1,
		MinuteLimit: v[5]}, nil
}
