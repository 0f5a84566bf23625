package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions says where Redis is and how long otpguard may wait for it.
type RedisOptions struct {
	URL      string        // redis://[user:pass@]host:port/db or rediss://
	Timeout  time.Duration // budget of one call, dial included
	PoolSize int           // 0: go-redis's default (10 per CPU)
}

// NewRedisClient builds a client whose every call returns within Timeout.
// go-redis's defaults would not: it ignores context deadlines unless
// ContextTimeoutEnabled is set, retries failed commands (and a retried INCR
// can count twice), and retries failed dials five times 100 ms apart.
func NewRedisClient(o RedisOptions) (*redis.Client, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("store: redis url: %w", err)
	}
	applyTimeouts(opt, o.Timeout)
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
	}
	return redis.NewClient(opt), nil
}

func applyTimeouts(opt *redis.Options, budget time.Duration) {
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = budget
	opt.ReadTimeout = budget
	opt.WriteTimeout = budget
	opt.PoolTimeout = budget
	opt.MaxRetries = -1   // never retry: a timed-out INCR may have counted
	opt.DialerRetries = 1 // one dial attempt, no 100 ms back-off loop
	opt.MinIdleConns = 2  // keep warm connections: a dial costs a round trip
	opt.DisableIdentity = true
}

// CheckRedisVersion refuses a server older than 7: EXPIRE ... NX, which the
// fixed windows rely on, arrived in Redis 7.0.
func CheckRedisVersion(ctx context.Context, rdb *redis.Client) error {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("store: redis info: %w", err)
	}
	version, major, err := RedisVersion(info)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if major < 7 {
		return fmt.Errorf("store: Redis %s is too old: otpguard needs Redis 7 or newer (EXPIRE ... NX)", version)
	}
	return nil
}

// RedisVersion reads redis_version from the text of INFO server.
func RedisVersion(info string) (version string, major int, err error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	major, err = strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if err != nil {
		return version, 0, fmt.Errorf("cannot read the Redis version from INFO (%q)", version)
	}
	return version, major, nil
}
