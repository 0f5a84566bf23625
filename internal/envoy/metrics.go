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
	// byDomain holds each known domain's counters, resolved once per set
	// of rules (prepare): a descriptor then costs one map lookup and an
	// atomic add, not a hash of its labels and the vector's lock.
	byDomain atomic.Pointer[domainCounters]
}

// domainCounters are the counters of the rules in force, by domain and
// result; unknown is the row of every domain the files do not name.
type domainCounters struct {
	known   map[string]*[resultCount]prometheus.Counter
	unknown [resultCount]prometheus.Counter
}

const resultCount = int(itemChecked) + 1

// The results of a descriptor in otpguard_envoy_descriptors_total, by
// itemState.
var results = [resultCount]string{
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

// prepare creates the series of rules at zero and resolves their counters.
func (m *Metrics) prepare(r *Rules) {
	if m == nil {
		return
	}
	c := &domainCounters{known: make(map[string]*[resultCount]prometheus.Counter, len(r.domains))}
	m.resolve("unknown", &c.unknown)
	for d := range r.domains {
		row := new([resultCount]prometheus.Counter)
		m.resolve(d, row)
		c.known[d] = row
	}
	m.byDomain.Store(c)
}

func (m *Metrics) resolve(domain string, row *[resultCount]prometheus.Counter) {
	for st, res := range results {
		row[st] = m.descriptors.WithLabelValues(domain, res)
	}
}

// counters is the row of domain's counters; nil when m is.
func (m *Metrics) counters(domain string) *[resultCount]prometheus.Counter {
	if m == nil {
		return nil
	}
	c := m.byDomain.Load()
	if row := c.known[domain]; row != nil {
		return row
	}
	return &c.unknown
}
