package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	lua "github.com/yuin/gopher-lua"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/store"
)

// The embedded Redis (here and in the simulator, which builds its
// service with this package) runs the store's scripts in gopher-lua, which keeps
// every positive integer key below lua.MaxArrayIndex (64 Mi by default)
// in a table's array part, padded with nils up to the key: the velocity
// scripts' tables keyed by hour (unix seconds / 3600, near half a
// million) pad half a million slots each time a country's baseline is
// computed, enough for a send to outlast the Redis timeout on a busy
// machine and answer store_unavailable. Real Redis's Lua keeps such keys
// in the hash part. With the bound at 1<<18 an hour's key goes to the
// hash part here too, while the scripts' sequences (replies, ARGV, fields
// to delete: at most a few thousand) stay in the array part, where # and
// ipairs read them. Set once, before any script runs.
func init() { lua.MaxArrayIndex = 1 << 18 }

// openRedis connects to Redis (or takes the caller's client, WithRedis),
// times and traces its commands, coalesces them into pipelines and puts
// the store over it.
func (w *wiring) openRedis(ctx context.Context) error {
	a := w.a
	cfg := a.cfg
	if w.o.rdb != nil {
		a.rdb = w.o.rdb
	} else {
		rdb, closeRedis, err := connectRedis(ctx, cfg, a.log)
		if err != nil {
			return err
		}
		a.rdb = rdb
		a.onClose(closeRedis)
	}
	a.rdb.AddHook(store.TimingHook(w.metrics.ObserveRedis))
	if err := w.tr.instrumentRedis(a.rdb); err != nil {
		return err
	}
	var co *store.Coalescer
	if cfg.RedisPipelines > 0 {
		// After the timing hook: it times each command as its caller waits.
		// A pipeline out for half the decision timeout lets the next one
		// go beside it: commands behind a slow reply still go out in time.
		var stop func()
		co, stop = store.Coalesce(a.rdb, store.CoalesceOptions{Pipelines: cfg.RedisPipelines,
			Stall: cfg.RedisTimeout / 2, Timeout: cfg.MaxWait()})
		a.onClose(stop)
	}
	a.store = store.NewRedis(a.rdb, cfg.RedisPrefix)
	if cfg.Redis.Mode == store.RedisCluster { // batches split per hash slot
		a.store = store.NewClusterRedis(a.rdb, cfg.RedisPrefix)
	}
	// The Fallback waits for the calls the Coalescer can abandon on the
	// caller's goroutine (store.Counters.TakeAbandons).
	a.store.WithLimitShards(cfg.LimitShards).WithCoalescer(co)
	return nil
}

// loadScripts preloads the Lua scripts into Redis's script cache.
func (w *wiring) loadScripts(ctx context.Context) error {
	a := w.a
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	err := a.store.LoadScripts(sctx)
	cancel()
	if err != nil {
		// Not fatal: a script missing from the cache is sent with EVAL.
		a.log.Warn("could not preload the Lua scripts; they load on first use", "err", err)
	}
	return nil
}

// connectRedis connects to Redis as configured (single, cluster or
// sentinel; internal/config), or starts the embedded
// miniredis, and checks the server can run otpguard's commands.
func connectRedis(ctx context.Context, cfg *config.Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	redis.SetLogger(store.ClientLog{Log: log}) // go-redis has one logger per process: the last App's
	if cfg.Embedded() {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Warn("EMBEDDED REDIS: limits live in this process only and are NOT shared between instances; set OTPGUARD_REDIS_URL for production",
			"redis", "miniredis")
		stopClock := driveClock(m, 10*time.Millisecond)
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: "redis://" + m.Addr(), Timeout: cfg.RedisTimeout, MaxWait: cfg.MaxWait()})
		if err != nil {
			stopClock()
			m.Close()
			return nil, nil, err
		}
		return rdb, func() { rdb.Close(); stopClock(); m.Close() }, nil
	}
	rdb, err := store.NewUniversalClient(cfg.RedisOptions())
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	switch err := store.CheckRedisVersion(sctx, rdb); {
	case errors.Is(err, store.ErrRedisUnreachable):
		// An instance restarted during an outage must still come up: it
		// serves by each policy's on_store_error until Redis answers (the
		// breaker probes it), and checks nothing it cannot reach.
		log.Error("REDIS UNREACHABLE at start-up: serving by each policy's on_store_error until it answers",
			"redis", cfg.RedisTarget(), "err", err)
	case err != nil:
		rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", cfg.RedisTarget(), err)
	default:
		log.Info("redis connected", "redis", cfg.RedisTarget(), "mode", cfg.Redis.Mode, "timeout", cfg.RedisTimeout.String())
		for _, w := range config.ClusterWarnings(sctx, rdb) {
			log.Warn(w)
		}
	}
	return rdb, func() { rdb.Close() }, nil
}

// driveClock makes the embedded Redis keep time. miniredis neither
// expires keys nor moves TIME on its own: told nothing, a 30 s cooldown
// would never end. Every tick the clock is set to now (TIME, PEXPIRETIME)
// and the TTLs are moved forward as much, so both agree to the tick.
func driveClock(m *miniredis.Miniredis, tick time.Duration) (stop func()) {
	last := time.Now()
	m.SetTime(last)
	t := time.NewTicker(tick)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				m.SetTime(now)
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}
