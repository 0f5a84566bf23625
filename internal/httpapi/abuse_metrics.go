package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// AbuseMetrics are the metrics of the SMS pumping defences and of
// delivery reports, registered on a Metrics registry beside the rest.
type AbuseMetrics struct {
	budgetRefused    *prometheus.CounterVec
	conversionAlerts *prometheus.CounterVec
	smsStatus        *prometheus.CounterVec
}

// NewAbuseMetrics registers the abuse metrics on m's registry.
func NewAbuseMetrics(m *Metrics) *AbuseMetrics {
	a := &AbuseMetrics{
		budgetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_budget_refused_total",
			Help: "Sends refused because the global SMS budget (otp.budget) is spent, by window (hour, day).",
		}, []string{"window"}),
		conversionAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_conversion_alerts_total",
			Help: "Conversion watch alerts (sends not followed by verifies), by scope (prefix, country) and action (reported, blocked).",
		}, []string{"scope", "action"}),
		smsStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_sms_status_total",
			Help: "Delivery status reports from the SMS provider (POST /sms/status), by status.",
		}, []string{"status"}),
	}
	m.Registry.MustRegister(a.budgetRefused, a.conversionAlerts, a.smsStatus)
	return a
}

// Hooks are the guard.AbuseHooks that feed these metrics.
func (a *AbuseMetrics) Hooks() guard.AbuseHooks {
	return guard.AbuseHooks{
		BudgetRefused:   func(window string) { a.budgetRefused.WithLabelValues(window).Inc() },
		ConversionAlert: func(scope, action string) { a.conversionAlerts.WithLabelValues(scope, action).Inc() },
	}
}

// SMSStatus counts one delivery report.
func (a *AbuseMetrics) SMSStatus(status string) { a.smsStatus.WithLabelValues(status).Inc() }
