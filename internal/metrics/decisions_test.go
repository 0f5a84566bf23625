package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestDecisionsByService: the OTP decisions carry the service label (the
// file's SID, "default" for the default service and the service marked
// default), their series at zero from Prepare for each; a limit policy's
// have an empty service, as before services existed.
func TestDecisionsByService(t *testing.T) {
	const shop, bank = "VA0123456789abcdef0123456789abcdef", "VAfedcba9876543210fedcba9876543210"
	m := New()
	p := guard.DefaultPolicies()
	p.Limits = nil
	p.Services = []guard.Service{{SID: shop}, {SID: bank, Default: true}}
	m.Prepare(p)
	for _, service := range []string{"default", shop} {
		for _, l := range [][2]string{{PolicySend, "allowed"}, {PolicySend, "budget_exhausted"}, {PolicyVerify, "too_many_attempts"}} {
			if got := counterValue(t, m.decisions, l[0], l[1], service); got != 0 {
				t.Errorf("%s %s %s before any decision: %v, want 0", l[0], l[1], service, got)
			}
		}
	}
	before := seriesCount(m.decisions)
	if want := 2 * (2 + len(sendOutcomes) + len(verifyOutcomes)); before != want {
		t.Errorf("series at start: %d, want %d (default and the shop; the bank is the default service)", before, want)
	}

	m.Send(shop, "NG", nil)
	m.Send(shop, "NG", errors.New("boom"))
	m.Send(guard.DefaultService, "GB", problem.Errorf(problem.CodeCooldown, "wait"))
	m.Verify(guard.DefaultService, nil)
	m.Verify(shop, problem.Errorf(problem.CodeWrongCode, "no"))
	m.Decision("api", "allowed")
	for _, tc := range []struct {
		policy, outcome, service string
		want                     float64
	}{
		{PolicySend, "allowed", shop, 1},
		{PolicySend, string(problem.CodeInternal), shop, 1},
		{PolicySend, "allowed", "default", 0},
		{PolicySend, "cooldown", "default", 1},
		{PolicySend, "cooldown", shop, 0},
		{PolicyVerify, "allowed", "default", 1},
		{PolicyVerify, "wrong_code", shop, 1},
		{"api", "allowed", "", 1},
	} {
		if got := counterValue(t, m.decisions, tc.policy, tc.outcome, tc.service); got != tc.want {
			t.Errorf("decisions{policy=%s,outcome=%s,service=%q} = %v, want %v", tc.policy, tc.outcome, tc.service, got, tc.want)
		}
	}
	if got := seriesCount(m.decisions); got != before+2 { // internal for the shop, api's allowed
		t.Errorf("series after: %d, want %d", got, before+2)
	}
}

func counterValue(t *testing.T, v *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := v.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// seriesCount is how many series v has (without creating one).
func seriesCount(v *prometheus.CounterVec) int {
	ch := make(chan prometheus.Metric, 1000)
	v.Collect(ch)
	close(ch)
	return len(ch)
}
