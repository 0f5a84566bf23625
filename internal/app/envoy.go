package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
)

// The Envoy rate-limit service (docs/envoy.md): its rules are read with
// the configuration, decided by a limit.Limiter built like /limits/check's
// (through the Fallback, with the hot keys and remembered denials), served
// by Run on OTPGUARD_GRPC_ADDR, and read again at SIGHUP.

// envoyPath is this instance's Envoy service.
type envoyPath struct {
	cfg        config.EnvoyConfig
	svc        *envoy.Service
	newLimiter func(map[string]limit.Policy) *limit.Limiter
	log        *slog.Logger
	reloads    *prometheus.CounterVec
	addr       atomic.Pointer[net.Addr] // bound by serve
	mu         sync.Mutex               // one reload at a time
}

// buildEnvoy builds the Envoy service when OTPGUARD_GRPC_ADDR is set: its
// limiter is built as /limits/check's (newLimiter), around the same
// Fallback, hot keys and metrics, and its calls take the API's in-flight
// slots (boundInFlight).
func (w *wiring) buildEnvoy(_ context.Context) error {
	a := w.a
	if !a.cfg.Envoy.On() {
		return nil
	}
	a.envoy = newEnvoyPath(a.cfg.Envoy, w.metrics, w.tr, a.log, a.inFlight, func(p map[string]limit.Policy) *limit.Limiter {
		return w.newLimiter(p)
	})
	return nil
}

func newEnvoyPath(cfg config.EnvoyConfig, metrics *metrics.Set, tr *tracing, log *slog.Logger, admission envoy.Admission,
	newLimiter func(map[string]limit.Policy) *limit.Limiter) *envoyPath {
	e := &envoyPath{cfg: cfg, newLimiter: newLimiter, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_envoy_config_reload_total",
			Help: "Reloads of the Envoy rate-limit configuration (SIGHUP), by result: ok (the new rules are in force) or error (the old ones are kept).",
		}, []string{"result"}),
	}
	e.reloads.WithLabelValues("ok")
	e.reloads.WithLabelValues("error")
	metrics.Registry.MustRegister(e.reloads)
	o := envoy.Options{Recorder: metrics, Metrics: envoy.NewMetrics(metrics.Registry), Log: log,
		MaxDescriptors: cfg.MaxDescriptors, MaxEntries: cfg.MaxEntries, Admission: admission}
	if tr != nil {
		o.TracerProvider, o.Propagator = tr.tp, tr.prop
	}
	e.svc = envoy.NewService(cfg.Rules, newLimiter(cfg.Rules.Policies), o)
	e.noted(cfg.Rules)
	return e
}

// noted logs what the files ask that otpguard accepts without acting on.
func (e *envoyPath) noted(r *envoy.Rules) {
	for _, n := range r.Notes {
		e.log.Info("envoy config: noted", "note", n)
	}
	e.log.Info("envoy rules loaded", "path", e.cfg.Path, "policies", len(r.Policies))
}

// reload reads the files again; bad files keep the rules in force.
func (e *envoyPath) reload(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	rules, err := config.ReadEnvoyRules(e.cfg.Path)
	if err != nil {
		e.reloads.WithLabelValues("error").Inc()
		e.log.ErrorContext(ctx, "ENVOY CONFIG RELOAD FAILED: the rules in force are kept", "path", e.cfg.Path, "err", err)
		return err
	}
	e.svc.Swap(rules, e.newLimiter(rules.Policies))
	e.reloads.WithLabelValues("ok").Inc()
	e.noted(rules)
	return nil
}

// serve starts the gRPC listener; stop ends it, letting calls under way
// finish until its context ends.
func (e *envoyPath) serve() (stop func(context.Context), err error) {
	srv, err := envoy.Listen(e.cfg.Server, e.svc)
	if err != nil {
		return nil, fmt.Errorf("OTPGUARD_GRPC_ADDR: %w", err)
	}
	addr := srv.Addr()
	e.addr.Store(&addr)
	tls := e.cfg.Server.CertFile != ""
	e.log.Info("envoy rate-limit service listening", "addr", addr.String(), "tls", tls, "mtls", e.cfg.Server.ClientCAFile != "")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(); err != nil {
			e.log.Error("envoy rate-limit service stopped", "err", err)
		}
	}()
	return func(ctx context.Context) {
		srv.Stop(ctx)
		<-done
	}, nil
}

// GRPCAddr is the address the Envoy rate-limit service listens on, once
// Run has bound it; nil before, or when OTPGUARD_GRPC_ADDR is unset.
func (a *App) GRPCAddr() net.Addr {
	if a.envoy == nil {
		return nil
	}
	if p := a.envoy.addr.Load(); p != nil {
		return *p
	}
	return nil
}
