package app

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/resilience"
)

// registerRequestMetrics adds what answers "why was this user refused?":
// the build, the spend budget read at scrape time, and every series an
// alert rule may read created at zero. The budget is read through the OTP
// service in force (a reload may change it).
func registerRequestMetrics(m *metrics.Set, a *metrics.Abuse, cfg *config.Config, otp func() *guard.OTP) {
	b := Build()
	m.RegisterBuildInfo(b.Version, b.Commit, b.Go)
	m.RegisterBudget(func(ctx context.Context) ([]guard.BudgetUse, error) { return otp().BudgetUse(ctx) })
	m.Prepare(cfg.Policies)
	a.Prepare(cfg.Policies)
}

// The gauges and counters that read the running parts' state. The metrics
// the handlers and senders observe are declared in internal/metrics; New
// registers both on one registry.

// registerOutage exports the breaker, Redis's state, N and the fallback
// decisions per policy.
func registerOutage(reg *prometheus.Registry, o *outage) {
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
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "otpguard_instances_vanished_total",
			Help: "Instances this one saw stop beating without leaving (crashed or cut off): their unsynced hot-key counts may be lost. Sum over the instances.",
		}, func() float64 { return float64(o.hb.Vanished()) }),
	)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "otpguard_redis_late_total",
		Help: "Store calls a healthy Redis answered past OTPGUARD_REDIS_TIMEOUT, waited for because the probe vouched for it: each would have gone to the fallback without the probe. Rising: this host is saturated.",
	}, func() float64 { return float64(o.fallback.Late()) }))
	reg.MustRegister(fallbackDecisions{o.fallback})
	reg.MustRegister(sharedFallbacks{o.fallback})
}

// fallbackDecisions is otpguard_fallback_decisions_total, read from the
// Fallback at each scrape: one series per policy it knows, so that the
// Envoy rules and the policies a reload adds are counted as the policy
// file's are, at zero from the start (Fallback.AddPolicies).
type fallbackDecisions struct{ fb *resilience.Fallback }

var fallbackDecisionsDesc = prometheus.NewDesc("otpguard_fallback_decisions_total",
	"Decisions taken without Redis (by on_store_error; refusals for closed), by policy.", []string{"policy"}, nil)

// Describe implements prometheus.Collector.
func (f fallbackDecisions) Describe(ch chan<- *prometheus.Desc) { ch <- fallbackDecisionsDesc }

// Collect implements prometheus.Collector.
func (f fallbackDecisions) Collect(ch chan<- prometheus.Metric) {
	for _, p := range f.fb.Status().Policies {
		// A limit policy is labelled by its name, as in
		// otpguard_decisions_total, not by its "limits." status name.
		label := strings.TrimPrefix(p.Policy, limit.PolicyName(""))
		ch <- prometheus.MustNewConstMetric(fallbackDecisionsDesc, prometheus.CounterValue, float64(p.Fallbacks), label)
	}
}

// registerHotKeys exports the sync-mode counters' table and what they
// could not send.
func registerHotKeys(reg *prometheus.Registry, h *resilience.HotKeys) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "otpguard_hotkey_deltas_discarded_total",
			Help: "Sync-mode counts dropped because their window ended before a sync could send them.",
		}, func() float64 { return float64(h.Discarded()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "otpguard_hotkey_deltas_lost_total",
			Help: "Sync-mode counts spent on this instance that the last sync at shutdown could not send.",
		}, func() float64 { return float64(h.Lost()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_hotkey_deltas_pending",
			Help: "Sync-mode counts spent on this instance and not yet in Redis.",
		}, func() float64 { return float64(h.Pending()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_hotkey_keys",
			Help: "Keys in this instance's sync-mode table.",
		}, func() float64 { return float64(h.Len()) }),
	)
}

// sharedFallbacksOpts is otpguard_shared_fallback_decisions_total{rule}.
var sharedFallbacksOpts = prometheus.CounterOpts{
	Name: "otpguard_shared_fallback_decisions_total",
	Help: "Decisions of a shared rule (per IP, prefix, country, budget, country volume, trust mark) taken from this instance's memory by its split limit because its key's Redis Cluster master did not answer while the request's own keys' did, by rule.",
}

var sharedFallbacksDesc = prometheus.NewDesc(sharedFallbacksOpts.Name, sharedFallbacksOpts.Help, []string{"rule"}, nil)

// sharedFallbacks exports Fallback.SharedFallbacks: a series per rule
// that fell back since start (a handful of rule names).
type sharedFallbacks struct{ fb *resilience.Fallback }

func (s sharedFallbacks) Describe(ch chan<- *prometheus.Desc) { ch <- sharedFallbacksDesc }

func (s sharedFallbacks) Collect(ch chan<- prometheus.Metric) {
	for rule, n := range s.fb.SharedFallbacks() {
		ch <- prometheus.MustNewConstMetric(sharedFallbacksDesc, prometheus.CounterValue, float64(n), rule)
	}
}
