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

// Velocity keeps the country velocity rule's counts (guard/velocity.go)
// and the solved tier's cap (solved.go): a send's count goes out with its
// limits (TakeSend), the rest are its refunds, verify credits and
// quarantines.
type Velocity struct{ keyspace }

var _ guard.Volumes = (*Velocity)(nil)

// velocityScript is the country velocity rule's decision (guard/velocity.go)
// (lua/take_volume.lua).
var velocityScript = script("take_volume")

// velocityRefundScript takes one send back off hour ARGV[1] and minute
// ARGV[2], never below zero and never creating the key or a field
// (lua/refund_volume.lua).
var velocityRefundScript = script("refund_volume")

// TakeVolume runs velocityScript for one send (TakeSend runs it with the
// send's limits).
func (r *Velocity) TakeVolume(ctx context.Context, t guard.VolumeTake) (guard.VolumeResult, error) {
	script, keys, args := r.volumeCall(t)
	return r.volumeResult(t, script.Run(ctx, r.rdb, keys, args...))
}

// RefundVolume gives back one send counted at under k and its carrier's
// counts (ID empty: none) (velocityRefundScript). It goes as a
// transaction, as the send's other counters do, on a connection of its
// own: a give-back issued beside another single command (the lookup
// budget's) does not wait for the coalescer's next pipeline.
func (r *Velocity) RefundVolume(ctx context.Context, k, carrier limit.Key, at time.Time) error {
	keys, args := r.refundKeys(k, carrier), []any{at.Unix() / 3600, at.Unix() / 60}
	pipe := r.rdb.TxPipeline()
	velocityRefundScript.EvalSha(ctx, pipe, keys, args...)
	_, err := pipe.Exec(ctx)
	if isNoScript(err) { // not loaded (a restarted Redis): EVAL, once
		err = velocityRefundScript.Run(ctx, r.rdb, keys, args...).Err()
	}
	if err != nil {
		return fmt.Errorf("store: refund volume %s: %w", r.key(k), err)
	}
	return nil
}

// refundKeys are velocityRefundScript's keys: the counts, then the
// carrier's when there is one (same hash tag).
func (r *Velocity) refundKeys(k, carrier limit.Key) []string {
	if carrier.ID == "" {
		return []string{r.key(k)}
	}
	return []string{r.key(k), r.key(carrier)}
}

// CountVerified counts one verified code in hour, in k and its carrier's
// counts (ID empty: none): HINCRBY and EXPIRE of each in one MULTI, so
// neither hash lives without a TTL, and the two share the country's hash
// tag (one slot on Cluster, one round trip).
func (r *Velocity) CountVerified(ctx context.Context, k, carrier limit.Key, hour int64, ttl time.Duration) error {
	key := r.key(k)
	pipe := r.rdb.TxPipeline()
	pipe.HIncrBy(ctx, key, fmt.Sprintf("v:%d", hour), 1)
	pipe.Expire(ctx, key, ttl)
	if carrier.ID != "" {
		ckey := r.key(carrier)
		pipe.HIncrBy(ctx, ckey, fmt.Sprintf("v:%d", hour), 1)
		pipe.Expire(ctx, ckey, ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: count verified %s: %w", key, err)
	}
	return nil
}

var _ guard.Normals = (*Velocity)(nil)

// NormalConversion reads the country's normal conversion that velocityScript
// cached for hour ("n:<hour>", permille): known is false when the hour has
// no figure yet, or its history was too thin (-1).
func (r *Velocity) NormalConversion(ctx context.Context, k limit.Key, hour int64) (float64, bool, error) {
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
func (r *Velocity) Quarantine(ctx context.Context, k limit.Key, until time.Time, ttl time.Duration) error {
	pipe := r.rdb.TxPipeline()
	pipe.Set(ctx, r.key(k), until.Unix(), ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: quarantine %s: %w", r.key(k), err)
	}
	return nil
}

// volumeArgs are velocityScript's keys and arguments for t. Without a
// trusted tier, a mark or a carrier, the keys the script does not read
// repeat KEYS[1] and KEYS[2] (one slot for all).
func (r *Velocity) volumeArgs(t guard.VolumeTake) ([]string, []any) {
	ttl := int64((time.Duration(t.Lookback+2) * time.Hour) / time.Second)
	keys := []string{r.key(t.Key), r.key(t.Quarantine), "", "", "", ""}
	keys[2], keys[3], keys[4], keys[5] = keys[0], keys[1], keys[0], keys[0]
	if t.TrustedKey.ID != "" {
		keys[2] = r.key(t.TrustedKey)
	}
	hasMark := t.Mark.ID != ""
	if hasMark {
		keys[3] = r.key(t.Mark)
	}
	// The carrier's share (KEYS[5], KEYS[6], ARGV[20]; guard/carriershare.go).
	carrierShare := 0.0
	if t.Carrier.FloorShare > 0 {
		keys[4], keys[5], carrierShare = r.key(t.Carrier.Key), r.key(t.Carrier.Since), t.Carrier.FloorShare
	}
	args := []any{t.Hour, t.Lookback, t.Floor, t.QFloor, t.Factor, t.HistoryMinSends, ttl, t.Now.Unix(), t.Now.Unix() / 60,
		t.MinuteShare, flag(t.Trusted), t.TFloor, t.TFactor, flag(t.NewOff), flag(hasMark),
		t.Unverified.Floor, t.Unverified.Share, t.Unverified.NormalDefault, t.Unverified.NormalMin,
		carrierShare, t.GrowthPerDay}
	// The number's cached risk answer, read with the count (KEYS[7],
	// ARGV[22]) where it may be (readsRisk); without one, KEYS[7] repeats
	// KEYS[1]. ARGV[23]: the conversion day-old hours need to warm the
	// country.
	risk, read := keys[0], r.readsRisk(t)
	if read {
		risk = r.key(t.Risk)
	}
	return append(keys, risk), append(args, flag(read), t.WarmConversion)
}

// readsRisk reports whether t's script reads the cached risk answer t
// asks for. The cache is every service's (the country's hash tag) and a
// named service's room carries the service in its tag (guard/room.go):
// on Cluster the two are in different slots, where one script cannot
// read both (CROSSSLOT), so the reply carries no answer (Risk.Read
// false) and the guard reads the cache in a round trip of its own
// (guard/riskstep.go, answer).
func (r *Velocity) readsRisk(t guard.VolumeTake) bool {
	return t.Risk.ID != "" && (!r.cluster || Slot(r.key(t.Risk)) == Slot(r.key(t.Key)))
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// volumeResult reads velocityScript's reply.
func (r *Velocity) volumeResult(t guard.VolumeTake, cmd *redis.Cmd) (guard.VolumeResult, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: %w", r.key(t.Key), err)
	}
	// The velocity rule's reply has eleven values, the solved cap's seven
	// to nine (ten when the vouched tier's place was tried first); the
	// cached risk answer's five follow, when asked and read (the solved
	// cap's then after nine, or ten).
	minLen, maxLen := 7, 9
	switch {
	case t.Solved == nil:
		minLen, maxLen = 11, 11
	case t.Solved.Vouched != nil: // a tenth: the vouched tier counted it
		minLen, maxLen = 10, 10
	}
	var risk []int64
	if r.readsRisk(t) {
		if len(v) != maxLen+5 {
			return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: script returned %d values, want %d", r.key(t.Key), len(v), maxLen+5)
		}
		v, risk = v[:maxLen], v[maxLen:]
	}
	if len(v) < minLen || len(v) > maxLen {
		return guard.VolumeResult{}, fmt.Errorf("store: take volume %s: script returned %d values, want %d to %d", r.key(t.Key), len(v), minLen, maxLen)
	}
	// The seventh value: the solved cap's "reused", the velocity rule's
	// "trusted"; an eighth: the unverified budget that refused (0: none); a
	// ninth: the carrier's share refused (its count, limit and budget); a
	// tenth: the country's warmth (guard/coldroom.go); an eleventh: the
	// room is contested (guard/contested.go).
	res := guard.VolumeResult{Allowed: v[0] == 1, Count: v[1], Limit: v[2], Baseline: v[3], Quarantined: v[4] == 1,
		MinuteLimit: v[5], Reused: t.Solved != nil && v[6] == 1, Trusted: t.Solved == nil && v[6] == 1}
	if len(v) >= 8 {
		res.Unverified = v[7]
	}
	if len(v) >= 9 {
		res.Carrier = v[8] == 1
	}
	if len(v) == 11 { // the velocity rule's: the country's warmth, the contest
		res.Warmth, res.Contested = v[9], v[10] == 1
	}
	if t.Solved != nil && len(v) == 10 {
		res.Vouched = v[9] == 1
	}
	if risk != nil {
		res.Risk = riskReply(risk)
	}
	return res, nil
}
