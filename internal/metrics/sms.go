package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/otpguard/otpguard/internal/guard"
)

// smsMetrics time the provider and count the sends by country.
type smsMetrics struct {
	provider *prometheus.HistogramVec
	// byCountry: one counter per region libphonenumber knows, created on
	// the first send there (or at start for the allowed countries), and
	// "other". The map is written only at start.
	countries *prometheus.CounterVec
	byCountry map[string]*lazyCounter
	other     *lazyCounter
}

type lazyCounter struct {
	vec   *prometheus.CounterVec
	label string
	c     atomic.Pointer[prometheus.Counter]
}

func (l *lazyCounter) get() prometheus.Counter {
	if c := l.c.Load(); c != nil {
		return *c
	}
	c := l.vec.WithLabelValues(l.label)
	l.c.Store(&c)
	return c
}

// otherCountry is the country label of a number with no region
// (+800, +882...) or one libphonenumber does not know.
const otherCountry = "other"

func newSMSMetrics(reg prometheus.Registerer) *smsMetrics {
	m := &smsMetrics{
		provider: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "otpguard_sms_provider_duration_seconds",
			Help: "Calls to the SMS provider, by provider (twilio, console), channel (sms, whatsapp, call) and outcome (sent, invalid_destination, not_sent, timeout, error): how long each took.",
			// Twilio answers in 100-500 ms; its timeout is 10 s.
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"provider", "channel", "outcome"}),
		countries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_sms_sent_by_country_total",
			Help: "Codes sent (the provider took the message), by the number's country: an ISO 3166 region libphonenumber knows, or other.",
		}, []string{"country"}),
		byCountry: map[string]*lazyCounter{},
	}
	for _, r := range guard.Regions() {
		m.byCountry[r] = &lazyCounter{vec: m.countries, label: r}
	}
	m.other = &lazyCounter{vec: m.countries, label: otherCountry}
	m.other.get()
	reg.MustRegister(m.provider, m.countries)
	return m
}

// SentTo counts one code sent to a number of region.
func (m *Set) SentTo(region string) {
	c := m.smsCalls.byCountry[region]
	if c == nil {
		c = m.smsCalls.other
	}
	c.get().Inc()
}

// ProviderCalls returns what records one call to provider on channel in
// otpguard_sms_provider_duration_seconds (sms.Timed's observe): its
// outcomes' series are created at once, at zero, and found with one map
// read per call.
func (m *Set) ProviderCalls(provider, channel string, outcomes []string) func(outcome string, d time.Duration) {
	byOutcome := make(map[string]prometheus.Observer, len(outcomes))
	for _, o := range outcomes {
		byOutcome[o] = m.smsCalls.provider.WithLabelValues(provider, channel, o)
	}
	return func(outcome string, d time.Duration) {
		h := byOutcome[outcome]
		if h == nil {
			h = m.smsCalls.provider.WithLabelValues(provider, channel, outcome)
		}
		h.Observe(d.Seconds())
	}
}
