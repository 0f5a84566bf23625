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

var _ guard.Volumes = (*Redis)(nil)

// velocityScript is the country velocity rule's decision (guard/velocity.go)
// (lua/take_volume.lua).
var velocityScript = script("take_volume")

// velocityRefundScript takes one send back off hour ARGV[1] and minute
// ARGV[2], never below zero and never creating the key or a field
// (lua/refund_volume.lua).
var velocityRefundScript = script("refund_volume")

// TakeVolume runs velocityScript for one send (TakeSend runs it with the
// send's limits).
func (r *Redis) TakeVolume(ctx context.Context, t guard.VolumeTake) (guard.VolumeResult, error) {
	script, keys, args := r.volumeCall(t)
	return r.volumeResult(t, script.Run(ctx, r.rdb, keys, args...))
}

// RefundVolume gives back one send counted at (velocityRefundScript).
func (r *Redis) RefundVolume(ctx context.Context, k limit.Key, at time.Time) error {
	if err := velocityRefundScript.Run(ctx, r.rdb, []string{r.key(k)}, at.Unix()/3600, at.Unix()/60).Err(); err != nil {
		return fmt.Errorf("store: refund volume %s: %w", r.key(k), err)
	}
	return nil
}

// CountVerified counts one verified code in hour: HINCRBY and EXPIRE in
// one MULTI, so the hash never lives without a TTL.
func (r *Redis) CountVerified(ctx context.Context, k limit.Key, hour int64, ttl time.Duration) error {
	key := r.key(k)
	pipe := r.rdb.TxPipeline()
	pipe.HIncrBy(ctx, key, fmt.Sprintf("v:%d", hour), 1)
	pipe.Expire(ctx, key, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: count verified %s: %w", key, err)
	}
	return nil
}

var _ guard.Normals = (*Redis)(nil)

// NormalConversion reads the country's normal conversion that velocityScript
// cached for hour ("n:<hour>", permille): known is false when the hour has
// no figure yet, or its history was too thin (-1).
func (r *Redis) NormalConversion(ctx context.Context, k limit.Key, hour int64) (float64, bool, error) {
	cmd := redis.NewStringCmd(ctx, "HGET", r.key(k), fmt.Sprintf("n:%d", hour))
	err := r.rdb.Process(ctx, cmd)
	var n int64
	if err == nil {
		n, err = cmd.Int64()
	}
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("store: normal conversion %s: %w", r.logKey(k), err)
	case n < 0:
		return 0, false, nil
	}
	return float64(n) / 1000, true, nil
}

// Quarantine records that the country's quarantine lasts until until (the
// service's clock), in a key that expires ttl after it is set: velocityScript
// compares the time, the TTL only cleans up.
func (r *Redis) Quarantine(ctx context.Context, k limit.Key, until time.Time, ttl time.Duration) error {
	pipe := r.rdb.TxPipeline()
	pipe.Set(ctx, r.key(k), until.Unix(), ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: quarantine %s: %w", r.key(k), err)
	}
	return nil
}
