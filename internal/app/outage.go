package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
)

// outage is what keeps decisions going when Redis is slow or down (README,
// "When Redis is down"): the heartbeat that counts live instances, and the
// Fallback (timeout, breaker, in-memory limiter) every decision goes through.
type outage struct {
	hb       *store.Heartbeat
	fallback *resilience.Fallback
	from     string // where N comes from: "heartbeat" or "config"
	done     chan struct{}
	// probe is a connection of its own that pings Redis every probeEvery:
	// Redis's health as seen from outside the decisions' queue.
	probe        redis.UniversalClient
	probeEvery   time.Duration
	probeTimeout time.Duration
	probeDone    chan struct{}
	// On Redis Cluster: the decision client, whose slot map the probe
	// reloads while a master fails, and the masters of the last round.
	cluster *redis.ClusterClient
	masters []string
}

// fallbackStore is what the Fallback decides through: the counters, and
// the trust marks it reads before a send's limits (it asks its Counter
// for guard.Trusts, resilience/trust.go).
type fallbackStore struct {
	*store.Counters
	*store.TrustMarks
}

// newOutage wires the heartbeat and the Fallback over the Redis store, and
// registers their metrics.
func newOutage(cfg *config.Config, rdb redis.UniversalClient, st *store.Redis, opts options, log *slog.Logger) (*outage, error) {
	o := &outage{from: "heartbeat", done: make(chan struct{}), probeDone: make(chan struct{}),
		probeEvery: cmp.Or(opts.probeEvery, resilience.DefaultProbeEvery),
		// A ping may take as long as a store call may: with a Redis
		// further away than DefaultProbeTimeout (OTPGUARD_REDIS_TIMEOUT
		// raised for it), a shorter ping would never vouch for it.
		probeTimeout: max(resilience.DefaultProbeTimeout, cfg.RedisTimeout)}
	probe, err := ownClient(cfg, rdb, func(po *store.RedisOptions) {
		// A ping is waited for past its timeout (Fallback.Probe), so its
		// steps may take the probe's patience.
		po.Timeout, po.MaxWait, po.PoolSize = o.probeTimeout, resilience.ProbePatience(o.probeEvery, o.probeTimeout), 1
	})
	if err != nil {
		return nil, err
	}
	o.probe = probe
	host, _ := os.Hostname()
	hbo := opts.heartbeat
	hbo.ID = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randomSuffix())
	hbo.OnBeat = func(err error) { o.fallback.Observe(err) }
	hbo.Logger = log
	if hbo.Now == nil {
		hbo.Now = opts.now
	}
	o.hb = store.NewHeartbeat(rdb, cfg.RedisPrefix, hbo)
	instances := o.hb.Instances
	if cfg.Instances > 0 {
		n := cfg.Instances
		instances, o.from = func() int { return n }, "config"
	}
	o.fallback = resilience.NewFallback(resilience.FallbackOptions{
		Counter: fallbackStore{st.Counters, st.TrustMarks}, Codes: st.Codes, Timeout: cfg.RedisTimeout, Instances: instances,
		Breaker: opts.breaker, Policies: &cfg.Policies, Logger: log, Now: opts.now,
		Ceiling: cfg.MaxWait(), ProbeEvery: o.probeEvery, ProbeTimeout: o.probeTimeout,
		// Recovery dials the decision pool here, outside any decision.
		Warm:   func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		NodeOf: nodeOf(rdb, st.Counters),
	})
	o.cluster, _ = rdb.(*redis.ClusterClient)
	return o, nil
}

// start probes and beats once (so Redis's health and N are known before
// the first request), then keeps both going until stop is called, not
// until ctx ends: ctx ending (SIGTERM) starts the drain, and the requests
// still draining, and the writers that flush after them (idempotent
// answers, the audit queue, the attack view, the hot keys), need the
// probe's word on Redis and the breaker it keeps closed as much as any
// request did. Close calls stop after all of them; stop waits for the
// leave.
func (o *outage) start(ctx context.Context, log *slog.Logger) (stop func()) {
	o.probeOnce(ctx)
	bg, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(o.probeDone)
		t := time.NewTicker(o.probeEvery)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				o.probeOnce(bg)
			}
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	if err := o.hb.Beat(sctx); err != nil {
		log.Warn("first heartbeat failed: splitting limits by the last known instance count", "err", err)
	}
	cancel()
	s := o.hb.State()
	log.Info("instances", "count", o.fallback.Instances(), "from", o.from, "id", s.ID)
	go func() {
		defer close(o.done)
		o.hb.Run(bg)
	}()
	return func() { stopBeats(); <-o.done; <-o.probeDone; o.probe.Close() }
}

// nodeOf names a key's node for the Fallback on Redis Cluster: its
// master's address (store.Counters.Master). nil (one node) otherwise.
func nodeOf(rdb redis.UniversalClient, st *store.Counters) func(limit.Key) string {
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	return st.Master
}

// probeOnce pings Redis on the probe's own connection and tells the
// Fallback; on Redis Cluster it pings every master (probeMasters).
func (o *outage) probeOnce(ctx context.Context) {
	if pc, ok := o.probe.(*redis.ClusterClient); ok && o.cluster != nil {
		o.probeMasters(ctx, pc)
		return
	}
	o.fallback.Probe(ctx, func(pctx context.Context) error { return o.probe.Ping(pctx).Err() })
}

// probeMasters pings every master of the cluster, each reported to the
// Fallback as its own node. The probe's client reads the slot map afresh
// each round (ForEachMaster). While a master does not answer, or when the
// masters changed (a replica was promoted), the decision client's slot
// map is reloaded at once (ReloadState: go-redis itself reloads only on
// MOVED, or every minute, and never on a refused connection), so a
// failover costs the time the cluster takes to promote, not a minute.
// The nodes of masters that left the slot map are dropped each round
// (Fallback.ForgetNodes).
func (o *outage) probeMasters(ctx context.Context, pc *redis.ClusterClient) {
	pctx, cancel := context.WithTimeout(ctx, resilience.ProbePatience(o.probeEvery, o.probeTimeout))
	defer cancel()
	var mu sync.Mutex
	var masters []string
	failed := false
	err := pc.ForEachMaster(pctx, func(_ context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		var err error
		o.fallback.ProbeNode(ctx, addr, func(pctx context.Context) error {
			err = c.Ping(pctx).Err()
			return err
		})
		mu.Lock()
		masters, failed = append(masters, addr), failed || err != nil
		mu.Unlock()
		return err
	})
	if ctx.Err() != nil {
		return
	}
	if o.endRound(masters, err != nil || failed) {
		o.cluster.ReloadState(ctx)
	}
}

// endRound takes the masters one probe round pinged (failed: a ping or
// the slot map's read failed) and reports whether the decision client's
// slot map is to be reloaded: something failed, or the masters changed.
// The nodes of masters the slot map no longer names are dropped, every
// round whatever failed in it: a master whose replica was promoted is
// pinged no more, so its breaker would stay where its last ping left it.
func (o *outage) endRound(masters []string, failed bool) (reload bool) {
	slices.Sort(masters)
	changed := !slices.Equal(masters, o.masters)
	if len(masters) > 0 {
		o.fallback.ForgetNodes(masters)
	}
	o.masters = masters
	return failed || changed
}

// readyCheck is GET /readyz's question to Redis. On one node: a ping. On
// Redis Cluster: a ping to every master of the slot map, at once; ready
// while any answers (a dead master costs only its own slots, which its
// replica's promotion gives back), down naming those that did not. The
// cluster client's own Ping goes to a random node, and would answer 503
// or 200 by chance while a master is dead.
func readyCheck(rdb redis.UniversalClient) func(ctx context.Context) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return func(ctx context.Context) ([]string, error) { return nil, rdb.Ping(ctx).Err() }
	}
	return func(ctx context.Context) ([]string, error) {
		var mu sync.Mutex
		var down []string
		var errs []error
		up := 0
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			err := c.Ping(ctx).Err()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				down, errs = append(down, c.Options().Addr), append(errs, err)
			} else {
				up++
			}
			return nil
		})
		slices.Sort(down)
		switch {
		case err != nil:
			return down, fmt.Errorf("readyz: redis cluster: %w", err)
		case up == 0:
			return down, fmt.Errorf("readyz: no redis cluster master answers: %w", errors.Join(errs...))
		}
		return down, nil
	}
}

// status is the store's status for /readyz and /ops/status.
func (o *outage) status() httpapi.StoreStatus {
	s := o.hb.State()
	return httpapi.StoreStatus{RedisUp: s.Up, RedisSince: s.Since, FallbackStatus: o.fallback.Status(), InstancesFrom: o.from,
		StoreShed: o.fallback.Shed(), StoreLate: o.fallback.Late()}
}

func randomSuffix() string {
	k, err := randomKey("")
	if err != nil || len(k) < 6 {
		return strconv.Itoa(os.Getpid())
	}
	return k[:6]
}
