package metrics

import (
	"errors"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// Series created at zero at start-up, so that an alert rule such as
// `increase(otpguard_decisions_total{outcome="budget_exhausted"}[5m]) > 0`
// has a series to read before the first event (a counter that appears with
// its first increment shows no increase).

// sendOutcomes and verifyOutcomes are the outcomes of /otp/send and
// /otp/verify in otpguard_decisions_total.
var (
	sendOutcomes = []problem.Code{
		problem.CodeCooldown, problem.CodePhoneRateLimited, problem.CodeIPRateLimited, problem.CodeDenied,
		problem.CodeCountryNotAllowed, problem.CodeNumberTypeNotAllowed, problem.CodePrefixRateLimited,
		problem.CodeCountryRateLimited, problem.CodeBudgetExhausted, problem.CodeUnusualVolume,
		problem.CodeInvalidPhone, problem.CodeInvalidDestination, problem.CodeProviderUnavailable,
		problem.CodeStoreUnavailable, problem.CodeOverloaded, problem.CodeCarrierRateLimited,
	}
	verifyOutcomes = []problem.Code{
		problem.CodeWrongCode, problem.CodeNoActiveCode, problem.CodeTooManyAttempts, problem.CodeInvalidPhone,
		problem.CodeInvalidCode, problem.CodeStoreUnavailable, problem.CodeOverloaded,
	}
)

// The policy label values otpguard itself uses in otpguard_decisions_total
// (guard.ReservedPolicyNames keeps limit policies from taking them).
const (
	PolicySend   = "otp_send"   // POST /otp/send
	PolicyVerify = "otp_verify" // POST /otp/verify
	PolicyBatch  = "limits"     // a /limits/check refused whole (unknown policy, bad input)
)

// Prepare creates, at zero, the series of every policy and outcome p can
// produce: decisions of the OTP routes (for the default service and each
// service p names) and of each limit policy, the SMS and Redis results,
// and the sends of each country p names. A service a reload adds gets its
// series with their first value.
func (m *Set) Prepare(p guard.Policies) {
	for _, service := range serviceLabels(p.Services) {
		m.decisions.WithLabelValues(PolicySend, "allowed", service)
		for _, c := range sendOutcomes {
			m.decisions.WithLabelValues(PolicySend, string(c), service)
		}
		m.decisions.WithLabelValues(PolicyVerify, "allowed", service)
		for _, c := range verifyOutcomes {
			m.decisions.WithLabelValues(PolicyVerify, string(c), service)
		}
	}
	for _, name := range p.LimitNames() {
		m.decisions.WithLabelValues(name, "allowed", "")
		m.decisions.WithLabelValues(name, string(problem.CodeRateLimited), "")
		m.memory.WithLabelValues(name)
	}
	m.sms.WithLabelValues("sent")
	m.sms.WithLabelValues("failed")
	m.redis.WithLabelValues("ok")
	m.redis.WithLabelValues("error")
	for _, r := range policyCountries(p) {
		if c := m.smsCalls.byCountry[r]; c != nil {
			c.get()
		}
	}
}

// Prepare creates the abuse series at zero: every budget window,
// conversion scope and action, the delivery statuses that mean a message
// did not arrive, and the velocity series of each country p names.
func (a *Abuse) Prepare(p guard.Policies) {
	for _, w := range []string{"hour", "day"} {
		a.budgetRefused.WithLabelValues(w)
	}
	for _, scope := range []string{"prefix", "country"} {
		for _, action := range []string{guard.OutcomeReported, guard.OutcomeBlocked, guard.OutcomeQuarantined} {
			a.conversionAlerts.WithLabelValues(scope, action)
		}
	}
	for _, st := range []string{"delivered", "undelivered", "failed"} {
		a.smsStatus.WithLabelValues(st, guard.ChannelSMS)
	}
	for _, r := range policyCountries(p) {
		a.velocityRefused.WithLabelValues(r)
		a.velocityAlerts.WithLabelValues(r)
	}
}

// serviceLabels are the service label's values services give: the
// default service's, then each named service's SID (the service marked
// default is the default service).
func serviceLabels(services []guard.Service) []string {
	out := []string{guard.DefaultServiceLabel}
	for _, s := range services {
		if !s.Default {
			out = append(out, guard.ServiceLabel(s.Owner()))
		}
	}
	return out
}

// policyCountries are the regions the OTP policy names: its allowed
// countries, the countries of per_country (not "*") and of the velocity
// rule's expected volumes. (Not every region libphonenumber knows: that
// would be hundreds of series at zero on every instance.)
func policyCountries(p guard.Policies) []string {
	seen := map[string]bool{}
	var out []string
	add := func(r string) {
		if r != "*" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, r := range p.OTP.AllowedCountries {
		add(r)
	}
	for r := range p.OTP.PerCountry {
		add(r)
	}
	for r := range p.OTP.CountryVelocity.Expected {
		add(r)
	}
	return out
}

// Outcome labels a decision: "allowed" or the refusal's code.
func Outcome(err error) string {
	if err == nil {
		return "allowed"
	}
	var pe *problem.Error
	if errors.As(err, &pe) {
		return string(pe.Code)
	}
	return string(problem.CodeInternal)
}
