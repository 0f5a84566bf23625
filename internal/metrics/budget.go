package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// budgetScrapeTimeout bounds the read of the budget at a scrape: a dead
// store costs a scrape at most this (an open breaker answers at once).
const budgetScrapeTimeout = time.Second

// budgetCollector reads the spend budget from the shared store when
// Prometheus scrapes: every instance reports the same figures, and no
// request pays for them.
type budgetCollector struct {
	read            func(ctx context.Context) ([]guard.BudgetUse, error)
	used, limit     *prometheus.Desc
	reset, override *prometheus.Desc
}

// RegisterBudget registers otpguard_sms_budget_used,
// otpguard_sms_budget_limit, otpguard_sms_budget_override and
// otpguard_sms_budget_reset_seconds per window (hour, day), read at each
// scrape by read (guard.OTP.BudgetUse). The limit is the one a send meets,
// an emergency override's when that is tighter than the file's (the
// override gauge says so): the "budget nearly spent" alert then fires on
// what is enforced. The limit is reported even when the store cannot be
// read; used and reset only when it was.
func (m *Set) RegisterBudget(read func(ctx context.Context) ([]guard.BudgetUse, error)) {
	m.Registry.MustRegister(&budgetCollector{
		read: read,
		used: prometheus.NewDesc("otpguard_sms_budget_used",
			"SMS the spend budget (otp.budget) has counted in its current window, by window (hour, day), read from the shared store at scrape time. Absent while the store cannot be read.",
			[]string{"window"}, nil),
		limit: prometheus.NewDesc("otpguard_sms_budget_limit",
			"The spend budget's limit in force per window (hour, day): the policy file's, or an emergency override's when tighter; windows that are off are absent.",
			[]string{"window"}, nil),
		override: prometheus.NewDesc("otpguard_sms_budget_override",
			"1 when an emergency override of the ops desk sets the spend budget's limit for the window (hour, day), 0 when the policy file does; absent with the limit.",
			[]string{"window"}, nil),
		reset: prometheus.NewDesc("otpguard_sms_budget_reset_seconds",
			"Seconds until the spend budget's current window ends, by window.",
			[]string{"window"}, nil),
	})
}

// Describe implements prometheus.Collector.
func (b *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.used
	ch <- b.limit
	ch <- b.reset
	ch <- b.override
}

// Collect implements prometheus.Collector.
func (b *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), budgetScrapeTimeout)
	defer cancel()
	uses, _ := b.read(ctx) // on an error the windows come back unknown
	for _, u := range uses {
		ch <- prometheus.MustNewConstMetric(b.limit, prometheus.GaugeValue, float64(u.Limit), u.Window)
		override := 0.0
		if u.Override {
			override = 1
		}
		ch <- prometheus.MustNewConstMetric(b.override, prometheus.GaugeValue, override, u.Window)
		if u.Known {
			ch <- prometheus.MustNewConstMetric(b.used, prometheus.GaugeValue, float64(u.Used), u.Window)
			ch <- prometheus.MustNewConstMetric(b.reset, prometheus.GaugeValue, u.ResetAfter.Seconds(), u.Window)
		}
	}
}
