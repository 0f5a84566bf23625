// Package metrics owns otpguard's Prometheus collectors and their
// registry: the decisions, Redis round trips, SMS sends and provider
// calls, requests by route, shedding, the spend budget read at scrape
// time, the abuse defences' and the ops desk's counters, and the build.
// The code that observes them (handlers, senders, the ops desk's queues)
// calls the methods here; nothing here knows echo or SQL.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// Set is otpguard's Prometheus metrics, on a registry of their own (no
// global state: two servers in one test process do not collide).
type Set struct {
	Registry  *prometheus.Registry
	decisions *prometheus.CounterVec
	memory    *prometheus.CounterVec
	redis     *prometheus.HistogramVec
	sms       *prometheus.CounterVec
	shed      *prometheus.CounterVec
	http      *httpMetrics // http.go
	smsCalls  *smsMetrics  // sms.go

	// The children the hot path uses, resolved once (children.go).
	decisionOf *children[prometheus.Counter]
	memoryOf   *children[prometheus.Counter]
	redisOK    prometheus.Observer
}

// New registers otpguard's metrics and the Go runtime's.
func New() *Set {
	m := &Set{
		Registry: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_decisions_total",
			Help: "Decisions by policy (otp_send, otp_verify or a limit policy), outcome (allowed or the refusal's code) and, for otp_send and otp_verify, service (a Verify service SID of the policy file, or default; empty for a limit policy).",
		}, []string{"policy", "outcome", "service"}),
		memory: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_decisions_from_memory_total",
			Help: "Limit checks denied from this instance's memory of an exact denial that still holds (mode memory), with no round trip to Redis, by policy. Also counted in otpguard_decisions_total.",
		}, []string{"policy"}),
		redis: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "otpguard_redis_call_duration_seconds",
			Help:    "Latency of Redis round trips (a pipeline counts once), by result.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, 1},
		}, []string{"result"}),
		sms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_sms_total",
			Help: "SMS handed to the provider, by result (sent, failed).",
		}, []string{"result"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "otpguard_shed_total",
			Help: "Requests shed with 503 overloaded, by route: more decisions in flight than OTPGUARD_MAX_IN_FLIGHT, or a call to a healthy Redis that outlived OTPGUARD_REDIS_MAX_WAIT.",
		}, []string{"route"}),
	}
	m.decisionOf = newChildren(func(policy, outcome, service string) prometheus.Counter {
		return m.decisions.WithLabelValues(policy, outcome, service)
	})
	m.memoryOf = newChildren(func(policy, _, _ string) prometheus.Counter { return m.memory.WithLabelValues(policy) })
	m.redisOK = m.redis.WithLabelValues("ok")
	for _, route := range []string{"/otp/send", "/otp/verify", "/limits/check"} {
		m.shed.WithLabelValues(route) // from zero, so alert rules work before the first
	}
	m.Registry.MustRegister(m.decisions, m.memory, m.redis, m.sms, m.shed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.http, m.smsCalls = newHTTPMetrics(m.Registry), newSMSMetrics(m.Registry)
	return m
}

// Decision counts one decision of a limit policy (no service).
func (m *Set) Decision(policy, outcome string) {
	m.decisionOf.with(policy, outcome, "").Inc()
}

// Verify counts one OTP check's decision for service: the owner tag of a
// service of the policy file ("" the default service, guard.Service.Owner),
// never a caller's string, so that the label's values stay the file's.
func (m *Set) Verify(service string, err error) {
	m.decisionOf.with(PolicyVerify, Outcome(err), guard.ServiceLabel(service)).Inc()
}

// FromMemory counts one limit check denied from memory (limit.ModeMemory).
func (m *Set) FromMemory(policy string) {
	m.memoryOf.with(policy, "", "").Inc()
}

// SMS counts one SMS handed to the provider.
func (m *Set) SMS(sent bool) {
	if sent {
		m.sms.WithLabelValues("sent").Inc()
	} else {
		m.sms.WithLabelValues("failed").Inc()
	}
}

// Send counts a send's decision for service (as Verify's) and the SMS it
// made or failed to make (err nil: sent to region), the same for every
// route that sends (/otp/send, Verify's Verifications): the provider's
// refusals are SMS that failed, the guard's refusals no SMS at all.
func (m *Set) Send(service, region string, err error) {
	m.decisionOf.with(PolicySend, Outcome(err), guard.ServiceLabel(service)).Inc()
	switch problem.CodeOf(err) {
	case "":
		m.SMS(true)
		m.SentTo(region)
	case problem.CodeProviderUnavailable, problem.CodeInvalidDestination:
		m.SMS(false)
	}
}

// ObserveRedis records one Redis round trip; it fits store.TimingHook.
func (m *Set) ObserveRedis(d time.Duration, err error) {
	if err != nil {
		m.redis.WithLabelValues("error").Observe(d.Seconds()) // rare: no series until the first
		return
	}
	m.redisOK.Observe(d.Seconds())
}

// Shed counts one request shed with 503 overloaded on route.
func (m *Set) Shed(route string) { m.shed.WithLabelValues(route).Inc() }
