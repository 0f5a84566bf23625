package envoy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Envoy path's own series, beside otpguard_decisions_total
// (Recorder) and the Fallback's otpguard_fallback_decisions_total. Their
// labels are bounded by the configuration: a domain the files do not name
// is counted as "unknown", never by its name.
type Metrics struct {
	descriptors *prometheus.CounterVec
	known       atomic.Pointer[map[string]bool]
}

// The results of a descriptor in otpguard_envoy_descriptors_total.
var results = map[itemState]string{
	itemUnmatched: "unmatched", itemUnlimited: "unlimited", itemReplaced: "replaced",
	itemTooCostly: "over_max_cost", itemChecked: "decided",
}

// NewMetrics registers the Envoy path's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_envoy_descriptors_total",
			Help: "Descriptors of ShouldRateLimit calls, by domain (\"unknown\" for one the Envoy configuration does not name) and result: decided (by a policy, in otpguard_decisions_total), unmatched (no rule: OK, as Envoy's service answers), unlimited, replaced, or over_max_cost (a hits_addend above 10^9, over any limit).",
		}, []string{"domain", "result"}),
	}
	reg.MustRegister(m.descriptors)
	return m
}

// prepare creates the series of rules at zero and learns their domains.
func (m *Metrics) prepare(r *Rules) {
	if m == nil {
		return
	}
	known := make(map[string]bool, len(r.domains))
	for d := range r.domains {
		known[d] = true
		for _, res := range results {
			m.descriptors.WithLabelValues(d, res)
		}
	}
	for _, res := range results {
		m.descriptors.WithLabelValues("unknown", res)
	}
	m.known.Store(&known)
}

func (m *Metrics) descriptor(domain string, st itemState) {
	if m == nil {
		return
	}
	if !(*m.known.Load())[domain] {
		domain = "unknown"
	}
	m.descriptors.WithLabelValues(domain, results[st]).Inc()
}
