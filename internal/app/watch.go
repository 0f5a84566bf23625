package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// The conversion watch runs after the answer (guard/watch.go): its queue
// is exported here, drained by Close, and flushed by FlushWatch.

// registerWatch exports the conversion watch's queue: the queue of the OTP
// service in force (a reload starts a new one, and the dropped count
// starts again from 0, which Prometheus reads as a counter reset).
func registerWatch(reg *prometheus.Registry, current func() *guard.OTP) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "otpguard_conversion_watch_dropped_total",
			Help: "Conversion watch events (sends and verifies to count) dropped because the watch's queue was full: the watch saw less, no request waited.",
		}, func() float64 { return float64(current().WatchDropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_conversion_watch_queued",
			Help: "Conversion watch events waiting to be counted in Redis.",
		}, func() float64 { return float64(current().WatchQueued()) }),
	)
}

// FlushWatch waits until the conversion watch has counted and judged every
// send and verify answered so far on this instance (its alerts raised), or
// ctx ends. Tests read the watch's results after it.
func (a *App) FlushWatch(ctx context.Context) error { return a.live.otp().Flush(ctx) }
