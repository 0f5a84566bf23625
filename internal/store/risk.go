package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Risks keeps the network's risk answers (guard/riskstep.go): one hash
// per number, og:otp:risk:{<country>}:<128-bit HMAC, base64url>, with
// the fields s (score), t (fetched at, unix seconds), b (blocked, 0 or 1)
// and l (the line type's code, guard.RiskLineTypeCode), expiring with its
// class's time (high_for, low_for, mid_for). The country hash tag lets the
// velocity script read it with a send's count (lua/take_volume.lua); no
// number is stored in clear.
type Risks struct{ keyspace }

var _ guard.Risks = (*Risks)(nil)

// CachedRisk reads the answer cached under k, and whether mark is set
// (ID "": not read), in one MULTI: both share the country's hash tag.
// A named service's mark carries the service in its tag too (guard/room.go):
// on Cluster, in another slot, the two reads go in one pipeline instead
// (go-redis sends each to its master), as nothing ties them.
func (r *Risks) CachedRisk(ctx context.Context, k, mark limit.Key) (guard.RiskCached, error) {
	pipe := r.rdb.TxPipeline()
	if r.cluster && mark.ID != "" && Slot(r.key(mark)) != Slot(r.key(k)) {
		pipe = r.rdb.Pipeline()
	}
	get := pipe.HMGet(ctx, r.key(k), "s", "t", "b", "l")
	var exists *redis.IntCmd
	if mark.ID != "" {
		exists = pipe.Exists(ctx, r.key(mark))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return guard.RiskCached{}, fmt.Errorf("store: read risk %s: %w", r.logKey(k), err)
	}
	vals := get.Val()
	v := make([]int64, 5)
	if len(vals) == 4 && vals[0] != nil {
		v[0] = 1
		for i, x := range vals {
			s, _ := x.(string)
			v[i+1], _ = strconv.ParseInt(s, 10, 64) // written by CacheRisk: whole numbers
		}
	}
	c := riskReply(v)
	c.Trusted = exists != nil && exists.Val() == 1
	return c, nil
}

// riskReply is a cached answer from its five values: found, score,
// fetched at, blocked, line type code (the velocity script's reply).
func riskReply(v []int64) guard.RiskCached {
	c := guard.RiskCached{Read: true, Found: v[0] == 1}
	if c.Found {
		c.Answer = guard.RiskAnswer{Score: int(v[1]), At: time.Unix(v[2], 0), Blocked: v[3] == 1, LineType: guard.RiskLineType(v[4])}
	}
	return c
}

// CacheRisk caches a under k for ttl: HSET and PEXPIRE in one MULTI, so
// the hash never lives without a TTL.
func (r *Risks) CacheRisk(ctx context.Context, k limit.Key, a guard.RiskAnswer, ttl time.Duration) error {
	key := r.key(k)
	pipe := r.rdb.TxPipeline()
	pipe.HSet(ctx, key, "s", a.Score, "t", a.At.Unix(), "b", flag(a.Blocked), "l", guard.RiskLineTypeCode(a.LineType))
	pipe.PExpire(ctx, key, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: cache risk %s: %w", r.logKey(k), err)
	}
	return nil
}

// ClearRisk deletes the answer cached under k.
func (r *Risks) ClearRisk(ctx context.Context, k limit.Key) (bool, error) {
	n, err := r.rdb.Del(ctx, r.key(k)).Result()
	if err != nil {
		return false, fmt.Errorf("store: clear risk %s: %w", r.logKey(k), err)
	}
	return n > 0, nil
}
