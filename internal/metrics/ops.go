package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Ops are the metrics of the audit queue and the deny-list cache,
// registered on a Set's registry beside the rest.
type Ops struct {
	auditDropped  prometheus.Counter
	auditWritten  prometheus.Counter
	denyReloads   *prometheus.CounterVec
	denyEntries   prometheus.Gauge
	auditQueueLen prometheus.GaugeFunc
}

// NewOps registers the ops metrics on m's registry. queueLen reports
// the audit events waiting to be written.
func NewOps(m *Set, queueLen func() int) *Ops {
	o := &Ops{
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "otpguard_audit_dropped_total",
			Help: "Audit events lost: the audit queue was full (the database was down or too slow for too long), or the database did not take them at shutdown.",
		}),
		auditWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "otpguard_audit_written_total",
			Help: "Audit events stored in the database, each counted once, when a write confirms it: it equals the rows the events left in the audit table (before retention). A retried write does not count or store an event twice.",
		}),
		denyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_denylist_reloads_total",
			Help: "Deny-list reloads from the database, by result (ok, error). On error the last list stays in force.",
		}, []string{"result"}),
		denyEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "otpguard_denylist_entries",
			Help: "Deny-list entries in force on this instance, as last loaded.",
		}),
		auditQueueLen: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "otpguard_audit_queue_length",
			Help: "Audit events waiting to be written.",
		}, func() float64 { return float64(queueLen()) }),
	}
	m.Registry.MustRegister(o.auditDropped, o.auditWritten, o.denyReloads, o.denyEntries, o.auditQueueLen)
	return o
}

// AuditDropped counts one event lost to a full queue; it fits
// ops.AuditQueueOptions.OnDrop.
func (o *Ops) AuditDropped() { o.auditDropped.Inc() }

// AuditWritten counts n events written; it fits AuditQueueOptions.OnWrite
// and DeskOptions.OnWrite.
func (o *Ops) AuditWritten(n int) { o.auditWritten.Add(float64(n)) }

// DenyReloaded records one deny-list reload; it fits
// ops.DenyCacheOptions.OnRefresh.
func (o *Ops) DenyReloaded(entries int, err error) {
	if err != nil {
		o.denyReloads.WithLabelValues("error").Inc()
		return
	}
	o.denyReloads.WithLabelValues("ok").Inc()
	o.denyEntries.Set(float64(entries))
}
