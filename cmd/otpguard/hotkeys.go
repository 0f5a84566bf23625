package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/store"
)

// startHotKeys runs the local counters of sync-mode policies (nil when no
// policy uses them) and returns stop, which ends them after a last attempt
// to send their pending counts.
func startHotKeys(ctx context.Context, policies map[string]guard.LimitPolicy, st *store.Redis,
	instances func() int, metrics *httpapi.Metrics, log *slog.Logger) (*guard.HotKeys, func()) {
	tick := time.Duration(0)
	for _, p := range policies {
		if p.Mode == guard.ModeSync && (tick == 0 || p.SyncInterval.D()/4 < tick) {
			tick = p.SyncInterval.D() / 4
		}
	}
	if tick == 0 {
		return nil, func() {}
	}
	tick = min(max(tick, 5*time.Millisecond), 250*time.Millisecond)
	h := guard.NewHotKeys(guard.HotKeysOptions{Store: st, Instances: instances, Logger: log})
	metrics.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "otpguard_hotkey_deltas_discarded_total",
			Help: "Sync-mode counts dropped because their window ended before a sync could send them.",
		}, func() float64 { return float64(h.Discarded()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_hotkey_deltas_pending",
			Help: "Sync-mode counts spent on this instance and not yet in Redis.",
		}, func() float64 { return float64(h.Pending()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_hotkey_keys",
			Help: "Keys in this instance's sync-mode table.",
		}, func() float64 { return float64(h.Len()) }),
	)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx, tick)
	}()
	log.Info("hot keys: sync-mode policies count locally", "tick", tick.String())
	return h, func() { cancel(); <-done }
}
