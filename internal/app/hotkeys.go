package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
)

// syncTimeout bounds one hot-key sync batch. Nobody waits on a sync, so it
// need not fit the decision timeout; held to that timeout, a large batch
// times out and may be counted twice when it is sent again.
const syncTimeout = time.Second

// startHotKeys runs the local counters of sync-mode policies (nil when no
// policy uses them) and returns stop, which ends them after a last attempt
// to send their pending counts. The counters do not stop with ctx: call
// stop once the HTTP server has drained, so that the last sync sees what
// the last requests spent.
func startHotKeys(ctx context.Context, cfg *config.Config, rdb redis.UniversalClient,
	instances func() int, log *slog.Logger) (*resilience.HotKeys, func(), error) {
	tick := time.Duration(0)
	for _, p := range cfg.Policies.Limits {
		if p.Mode == limit.ModeSync && (tick == 0 || p.SyncInterval/4 < tick) {
			tick = p.SyncInterval / 4
		}
	}
	if tick == 0 {
		return nil, func() {}, nil
	}
	tick = min(max(tick, 5*time.Millisecond), 250*time.Millisecond)
	timeout := max(syncTimeout, cfg.RedisTimeout)
	st, closeStore, err := syncStore(cfg, rdb, timeout)
	if err != nil {
		return nil, nil, err
	}
	h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: st, Instances: instances, Logger: log, Timeout: timeout})
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		runHotKeys(ctx, h, tick)
	}()
	log.Info("hot keys: sync-mode policies count locally", "tick", tick.String())
	return h, func() { cancel(); <-done; closeStore() }, nil
}

// syncStore is a store over a client of its own, as configured but with
// timeout in place of the decision timeout (OTPGUARD_REDIS_TIMEOUT). It has
// no timing hook: syncs are not decisions, and would skew the latency the
// Redis metrics report.
func syncStore(cfg *config.Config, rdb redis.UniversalClient, timeout time.Duration) (*store.Counters, func(), error) {
	c, err := ownClient(cfg, rdb, func(o *store.RedisOptions) { o.Timeout, o.MaxWait = timeout, 0 })
	if err != nil {
		return nil, nil, err
	}
	if cfg.Redis.Mode == store.RedisCluster {
		return store.NewClusterRedis(c, cfg.RedisPrefix).WithLimitShards(cfg.LimitShards).Counters, func() { c.Close() }, nil
	}
	return store.NewRedis(c, cfg.RedisPrefix).WithLimitShards(cfg.LimitShards).Counters, func() { c.Close() }, nil
}

// ownClient is a client of its own to the Redis rdb reaches (the embedded
// one too), as configured but changed by tune: the hot-key syncs and the
// probe must not queue behind decisions, nor decisions behind them.
func ownClient(cfg *config.Config, rdb redis.UniversalClient, tune func(*store.RedisOptions)) (redis.UniversalClient, error) {
	o := cfg.RedisOptions()
	if c, ok := rdb.(*redis.Client); ok && cfg.RedisURL == "" && cfg.Redis.Mode == store.RedisSingle {
		o.URL = "redis://" + c.Options().Addr // the embedded miniredis
	}
	tune(&o)
	return store.NewUniversalClient(o)
}

// runHotKeys syncs due keys every tick until ctx ends, then makes a last
// attempt to send what is pending. ctx should end only once no check can
// reach h any more (after the HTTP server has drained), or the last attempt
// misses what is spent after it. A sync in flight is never cut short: a
// MULTI cut after it was sent may have counted, and would be sent again.
func runHotKeys(ctx context.Context, h *resilience.HotKeys, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.Flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			_ = h.SyncDue(context.WithoutCancel(ctx))
		}
	}
}
