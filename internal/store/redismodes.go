package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ways to reach Redis (RedisOptions.Mode).
const (
	RedisSingle   = "single"   // one server (or a proxy), by URL
	RedisCluster  = "cluster"  // Redis Cluster, by seed nodes
	RedisSentinel = "sentinel" // a master watched by Sentinels, by sentinel addresses and master name
)

// NewUniversalClient builds a client for o.Mode with the same promise as
// NewRedisClient: every call returns within Timeout, and no command is
// ever sent twice. A single server is NewRedisClient. A cluster client
// also follows no MOVED/ASK redirect and retries nothing (MaxRedirects -1):
// its retry loop would resend a command that failed after it was written
// (an INCR that may have counted). During a failover the first calls to a
// moved slot fail, take the fallback and make the client reload the slot
// map; the next ones go to the new master. A Sentinel client asks the
// sentinels for the master and follows their switch-master announcements.
func NewUniversalClient(o RedisOptions) (redis.UniversalClient, error) {
	switch o.Mode {
	case "", RedisSingle:
		return NewRedisClient(o)
	case RedisCluster, RedisSentinel:
	default:
		return nil, fmt.Errorf("store: redis mode %q: want single, cluster or sentinel", o.Mode)
	}
	if len(o.Addrs) == 0 {
		return nil, fmt.Errorf("store: redis %s: no addresses", o.Mode)
	}
	uo := &redis.UniversalOptions{
		Addrs: o.Addrs, MasterName: o.Master,
		Username: o.Username, Password: o.Password,
		PoolSize: o.PoolSize,
	}
	if o.TLS {
		uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	applyUniversalTimeouts(uo, o.stepTimeout())
	var rdb redis.UniversalClient
	if o.Mode == RedisCluster {
		uo.MaxRedirects = -1
		rdb = redis.NewClusterClient(uo.Cluster())
	} else {
		if o.Master == "" {
			return nil, errors.New("store: redis sentinel: no master name")
		}
		rdb = redis.NewFailoverClient(uo.Failover())
	}
	rdb.AddHook(timeoutHook(o.stepTimeout()))
	return rdb, nil
}

// applyUniversalTimeouts is applyTimeouts for the options of a cluster or
// Sentinel client: the same timeout on every step, no retries.
func applyUniversalTimeouts(uo *redis.UniversalOptions, timeout time.Duration) {
	var opt redis.Options
	applyTimeouts(&opt, timeout)
	uo.ContextTimeoutEnabled = opt.ContextTimeoutEnabled
	uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout, uo.PoolTimeout = opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout
	uo.MaxRetries, uo.DialerRetries, uo.MinIdleConns = opt.MaxRetries, opt.DialerRetries, opt.MinIdleConns
	uo.DisableIdentity, uo.Protocol = opt.DisableIdentity, opt.Protocol
}

// checkEveryMaster runs the version check on every master of a cluster. A
// cluster whose slot map cannot be read did not answer.
func checkEveryMaster(ctx context.Context, c *redis.ClusterClient) error {
	var nodeErr error
	var mu sync.Mutex
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		err := CheckRedisVersion(ctx, node)
		if err != nil {
			mu.Lock()
			nodeErr = err
			mu.Unlock()
		}
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if nodeErr != nil {
		return nodeErr
	}
	if err != nil {
		return fmt.Errorf("store: redis cluster: %w", classifyStartupError(err))
	}
	return nil
}
