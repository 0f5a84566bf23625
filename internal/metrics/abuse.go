package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// Abuse are the metrics of the SMS pumping defences and of
// delivery reports, registered on a Set's registry beside the rest.
type Abuse struct {
	budgetRefused    *prometheus.CounterVec
	conversionAlerts *prometheus.CounterVec
	velocityRefused  *prometheus.CounterVec
	velocityAlerts   *prometheus.CounterVec
	trustHeld        *prometheus.CounterVec
	coldRoomRefused  *prometheus.CounterVec
	smsStatus        *prometheus.CounterVec
}

// NewAbuse registers the abuse metrics on m's registry.
func NewAbuse(m *Set) *Abuse {
	a := &Abuse{
		budgetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_budget_refused_total",
			Help: "Sends refused because the global SMS budget (otp.budget) is spent, by window (hour, day).",
		}, []string{"window"}),
		conversionAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_conversion_alerts_total",
			Help: "Conversion watch alerts (sends not followed by verifies), by scope (prefix, country) and action (reported, blocked, quarantined).",
		}, []string{"scope", "action"}),
		velocityRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_velocity_refused_total",
			Help: "Sends refused by the country velocity rule (unusual_volume), by country.",
		}, []string{"country"}),
		velocityAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_velocity_alerts_total",
			Help: "Countries the country velocity rule began refusing, once per country and hour across instances (alert on any increase).",
		}, []string{"country"}),
		trustHeld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_trust_marks_held_total",
			Help: "Trust marks written held: earned by a verify in an hour whose new numbers ran above their country's normal (their carrier's share of it while the carriers split the country), by country and carrier (\"\" when the country judged).",
		}, []string{"country", "carrier"}),
		coldRoomRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_cold_room_refused_total",
			Help: "Untrusted sends refused (or challenged) because the cold room, shared by every country without verified history, is full this hour or day, by country.",
		}, []string{"country"}),
		smsStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_sms_status_total",
			Help: "Delivery status reports from the SMS provider (POST /sms/status), by status and channel (sms, whatsapp, call).",
		}, []string{"status", "channel"}),
	}
	m.Registry.MustRegister(a.budgetRefused, a.conversionAlerts, a.velocityRefused, a.velocityAlerts, a.trustHeld, a.coldRoomRefused, a.smsStatus)
	return a
}

// Hooks are the guard.AbuseHooks that feed these metrics.
func (a *Abuse) Hooks() guard.AbuseHooks {
	return guard.AbuseHooks{
		BudgetRefused:   func(window string) { a.budgetRefused.WithLabelValues(window).Inc() },
		ConversionAlert: func(scope, action string) { a.conversionAlerts.WithLabelValues(scope, action).Inc() },
		VelocityRefused: func(country string) { a.velocityRefused.WithLabelValues(country).Inc() },
		VelocityAlert:   func(country string) { a.velocityAlerts.WithLabelValues(country).Inc() },
		TrustMarkHeld:   func(country, carrier string) { a.trustHeld.WithLabelValues(country, carrier).Inc() },
		ColdRoomRefused: func(country string) { a.coldRoomRefused.WithLabelValues(country).Inc() },
	}
}

// SMSStatus counts one delivery report of a message or call of channel.
func (a *Abuse) SMSStatus(status, channel string) { a.smsStatus.WithLabelValues(status, channel).Inc() }
