package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/store"
)

// outage is what keeps decisions going when Redis is slow or down (README,
// "When Redis is down"): the heartbeat that counts live instances, and the
// Fallback (budget, breaker, in-memory limits) every decision goes through.
type outage struct {
	hb       *store.Heartbeat
	fallback *guard.Fallback
	from     string // where N comes from: "heartbeat" or "config"
	done     chan struct{}
}

// newOutage wires the heartbeat and the Fallback over the Redis store, and
// registers their metrics.
func newOutage(cfg *Config, rdb redis.UniversalClient, st *store.Redis, metrics *httpapi.Metrics, log *slog.Logger) *outage {
	o := &outage{from: "heartbeat", done: make(chan struct{})}
	host, _ := os.Hostname()
	o.hb = store.NewHeartbeat(rdb, cfg.RedisPrefix, store.HeartbeatOptions{
		ID:     fmt.Sprintf("%s/%d/%s", host, os.Getpid(), randomSuffix()),
		OnBeat: func(err error) { o.fallback.Observe(err) },
		Logger: log,
	})
	instances := o.hb.Instances
	if cfg.Instances > 0 {
		n := cfg.Instances
		instances, o.from = func() int { return n }, "config"
	}
	o.fallback = guard.NewFallback(guard.FallbackOptions{
		Counter: st, Codes: st, Budget: cfg.RedisTimeout, Instances: instances,
		Policies: &cfg.Policies, Logger: log,
	})
	o.register(metrics.Registry)
	return o
}

// register exports the breaker, Redis's state, N and the fallback
// decisions per policy.
func (o *outage) register(reg *prometheus.Registry) {
	breaker := map[string]float64{"closed": 0, "half-open": 1, "open": 2}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_redis_breaker_state",
			Help: "The breaker in front of Redis: 0 closed, 1 half-open (probing), 2 open (decisions go to the fallback).",
		}, func() float64 { return breaker[o.fallback.Status().Breaker] }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_redis_up",
			Help: "1 when Redis answered this instance's last heartbeat.",
		}, func() float64 {
			if o.hb.State().Up {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_instances",
			Help: "Live instances (N) that open policies split their limit by while Redis is down.",
		}, func() float64 { return float64(o.fallback.Instances()) }),
	)
	for _, p := range o.fallback.Status().Policies {
		name := p.Policy
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "otpguard_fallback_decisions_total",
			Help:        "Decisions taken without Redis (by on_store_error; refusals for closed), by policy.",
			ConstLabels: prometheus.Labels{"policy": name},
		}, func() float64 {
			for _, q := range o.fallback.Status().Policies {
				if q.Policy == name {
					return float64(q.Fallbacks)
				}
			}
			return 0
		}))
	}
}

// start beats once (so N is known before the first request), then every
// second until ctx ends or stop is called; stop waits for the leave.
func (o *outage) start(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, stopBeats := context.WithCancel(ctx)
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	if err := o.hb.Beat(sctx); err != nil {
		log.Warn("first heartbeat failed: splitting limits by the last known instance count", "err", err)
	}
	cancel()
	s := o.hb.State()
	log.Info("instances", "count", o.fallback.Instances(), "from", o.from, "id", s.ID)
	go func() {
		defer close(o.done)
		o.hb.Run(ctx)
	}()
	return func() { stopBeats(); <-o.done }
}

// status is the store's status for /readyz and /ops/status.
func (o *outage) status() httpapi.StoreStatus {
	s := o.hb.State()
	return httpapi.StoreStatus{RedisUp: s.Up, RedisSince: s.Since, FallbackStatus: o.fallback.Status(), InstancesFrom: o.from}
}

func randomSuffix() string {
	k, err := randomKey("")
	if err != nil || len(k) < 6 {
		return strconv.Itoa(os.Getpid())
	}
	return k[:6]
}
