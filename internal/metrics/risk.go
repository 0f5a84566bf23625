package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// riskResults are the results of otpguard_risk_lookups_total, each
// series there from the start.
var riskResults = []string{"high", "low", "mid", "error", "over_budget"}

// Risk is the metrics of the network's risk score (otp.risk).
type Risk struct {
	lookups *prometheus.CounterVec
	cost    prometheus.Counter
	latency prometheus.Histogram
	price   float64
}

// NewRisk registers the risk score's metrics on m's registry; price is
// what one lookup costs, in US dollars.
func NewRisk(m *Set, price float64) *Risk {
	r := &Risk{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_risk_lookups_total",
			Help: "Risk score lookups (otp.risk), by result: high, low, mid, error (failed or slow), over_budget (not asked).",
		}, []string{"result"}),
		cost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "otpguard_risk_lookup_cost_usd_total",
			Help: "What the risk score lookups asked cost, in US dollars (OTPGUARD_RISK_LOOKUP_PRICE each).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "otpguard_risk_lookup_seconds",
			Help:    "How long one risk score lookup took, answered or not.",
			Buckets: []float64{.05, .1, .25, .5, 1, 1.5, 2.5, 5},
		}),
		price: price,
	}
	for _, res := range riskResults {
		r.lookups.WithLabelValues(res)
	}
	m.Registry.MustRegister(r.lookups, r.cost, r.latency)
	return r
}

// Hooks are the guard.RiskHooks that feed these metrics: a lookup asked
// (every result but over_budget) costs the price, answered or not.
func (r *Risk) Hooks() guard.RiskHooks {
	return guard.RiskHooks{Lookup: func(result string, d time.Duration) {
		if result == "none" {
			result = "error" // an answer already too old to use
		}
		r.lookups.WithLabelValues(result).Inc()
		if result == "over_budget" {
			return
		}
		r.cost.Add(r.price)
		r.latency.Observe(d.Seconds())
	}}
}
