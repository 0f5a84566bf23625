package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/metrics"
)

// Live policy changes (README.md, "Changing limits during an attack").
// SIGHUP makes Reload read the policy file again. A file that parses and
// validates as at start-up replaces the policy whole: a fresh OTP service
// and limiter are built from it around the long-lived parts (Redis, the
// Fallback and breaker, the deny-list, the hot keys, the queues, the
// metrics) and swapped in with one atomic store; each request loads the
// set once, so it is decided entirely by the old policy or entirely by the
// new. A bad file changes nothing, and says so: a log line, a metric and
// /ops/status.

// ErrNoPolicyFile is Reload's answer when no OTPGUARD_CONFIG was given:
// the embedded defaults are in force and there is nothing to read again.
var ErrNoPolicyFile = errors.New("no policy file to reload: OTPGUARD_CONFIG is not set, the built-in defaults are in force")

// live is the policy in force and what reloads it.
type live struct {
	path   string
	log    *slog.Logger
	build  func(guard.Policies) (httpapi.Services, error)
	server *httpapi.Server // set once New has built it

	mu sync.Mutex // one reload at a time
	// otpInForce is the OTP service in force: its conversion watch is
	// drained at Close, or when a reload replaces it.
	otpInForce atomic.Pointer[guard.OTP]
	current    atomic.Pointer[guard.Policies]
	loadedAt   atomic.Pointer[time.Time]
	last       atomic.Pointer[reloadOutcome]

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

// reloadOutcome is the last reload's, for /ops/status.
type reloadOutcome struct {
	at  time.Time
	err error
}

func newLive(cfg *config.Config, log *slog.Logger, metricSet *metrics.Set, build func(guard.Policies) (httpapi.Services, error)) *live {
	l := &live{path: cfg.ConfigFile, log: log, build: build,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_config_reload_total",
			Help: "Reloads of the policy file (SIGHUP), by result: ok (the new policy is in force) or error (the old one is kept).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "otpguard_config_last_reload_success_timestamp_seconds",
			Help: "When the policy in force was read (start-up or the last good reload), as a Unix time.",
		}),
	}
	l.reloads.WithLabelValues("ok")
	l.reloads.WithLabelValues("error")
	metricSet.Registry.MustRegister(l.reloads, l.lastSuccess)
	p := cfg.Policies
	l.current.Store(&p)
	l.loaded(time.Now())
	return l
}

func (l *live) loaded(at time.Time) {
	l.loadedAt.Store(&at)
	l.lastSuccess.Set(float64(at.UnixNano()) / 1e9)
}

// setOTP records the OTP service in force and returns the one it replaces
// (nil at start).
func (l *live) setOTP(o *guard.OTP) *guard.OTP { return l.otpInForce.Swap(o) }

// otp is the OTP service in force.
func (l *live) otp() *guard.OTP { return l.otpInForce.Load() }

// policy is the policy in force.
func (l *live) policy() guard.Policies { return *l.current.Load() }

// Reload reads the policy file again and, when it is valid, puts it in
// force on this instance; otherwise the policy in force stays and the
// error says why (it is also logged, counted in
// otpguard_config_reload_total{result="error"} and shown in /ops/status).
// The cmd sends SIGHUP here; tests call it directly.
// With OTPGUARD_ENVOY_CONFIG, it reads the Envoy rules again too (each
// set of files is kept or replaced on its own).
func (a *App) Reload(ctx context.Context) error {
	if a.envoy == nil {
		return a.live.reload(ctx)
	}
	var err error
	if a.live.path != "" { // else the defaults are in force: nothing to read
		err = a.live.reload(ctx)
	}
	return errors.Join(err, a.envoy.reload(ctx))
}

// Policies is the policy in force on this instance.
func (a *App) Policies() guard.Policies { return a.live.policy() }

func (l *live) reload(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := l.read()
	var next httpapi.Services
	if err == nil {
		next, err = l.build(p) // reads the services' secret files
	}
	l.last.Store(&reloadOutcome{at: time.Now(), err: err})
	if err != nil {
		l.reloads.WithLabelValues("error").Inc()
		l.log.ErrorContext(ctx, "POLICY RELOAD FAILED: the policy in force is kept", "file", l.path, "err", err)
		return err
	}
	l.server.SetServices(next)
	// The replaced service's watch counts what it has queued, then stops;
	// a request still finishing on it after that drops its watch event
	// (counted as dropped), as at shutdown.
	go l.setOTP(next.OTP).Close()
	l.current.Store(&p)
	l.loaded(time.Now())
	l.reloads.WithLabelValues("ok").Inc()
	l.log.InfoContext(ctx, "policy reloaded", "file", l.path, "limit_policies", len(p.Limits))
	return nil
}

// read reads and validates the file as start-up does.
func (l *live) read() (guard.Policies, error) {
	if l.path == "" {
		return guard.Policies{}, ErrNoPolicyFile
	}
	p, err := config.LoadPolicies(l.path)
	if err != nil {
		return guard.Policies{}, err
	}
	if err := p.Validate(); err != nil {
		return guard.Policies{}, fmt.Errorf("policy file %s: %w", l.path, err)
	}
	return p, nil
}

// policyStatus is the policy file's state for /ops/status.
func (a *App) policyStatus() *httpapi.PolicyFileStatus {
	st := &httpapi.PolicyFileStatus{Path: a.live.path, LoadedAt: *a.live.loadedAt.Load()}
	if last := a.live.last.Load(); last != nil {
		st.LastReloadAt, st.LastReloadOK = last.at, last.err == nil
		if last.err != nil {
			st.LastError = last.err.Error()
		}
	}
	if c := a.ops.overrides; c != nil {
		now := time.Now()
		if a.ops.now != nil {
			now = a.ops.now()
		}
		for _, o := range c.ActiveOverrides() {
			if o.Active(now) {
				st.Overrides++
			}
		}
		st.OverridesLoadedAt = c.LoadedAt()
	}
	return st
}

// reloadOnSIGHUP reloads the policy file at every SIGHUP until ctx ends or
// stop is called (README.md, "Changing limits during an attack"). A bad
// file keeps the policy in force; Reload logs and counts it.
func reloadOnSIGHUP(ctx context.Context, a *App) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				a.Logger().Info("SIGHUP: reloading the policy file")
				_ = a.Reload(ctx) // logged, counted and shown in /ops/status inside
			}
		}
	}()
	return func() { signal.Stop(hup); cancel(); <-done }
}
