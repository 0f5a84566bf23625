package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestProviderCalls: every outcome named starts at zero, and a call is
// counted under its provider, channel and outcome only.
func TestProviderCalls(t *testing.T) {
	outcomes := []string{"sent", "timeout", "error"}
	m := New()
	observe := m.ProviderCalls("twilio", "call", outcomes)
	m.ProviderCalls("twilio", "sms", outcomes) // its series start at zero too
	for _, o := range outcomes {
		if got := histCount(t, m.smsCalls.provider, "twilio", "call", o); got != 0 {
			t.Errorf("outcome %s before any call: %d, want 0", o, got)
		}
	}
	observe("timeout", time.Second)
	for _, o := range outcomes {
		want := 0
		if o == "timeout" {
			want = 1
		}
		if got := histCount(t, m.smsCalls.provider, "twilio", "call", o); got != want {
			t.Errorf("outcome %s counted %d, want %d", o, got, want)
		}
		if got := histCount(t, m.smsCalls.provider, "twilio", "sms", o); got != 0 {
			t.Errorf("outcome %s of sms counted %d, want 0: the call's is its own", o, got)
		}
	}
}

func histCount(t *testing.T, h *prometheus.HistogramVec, labels ...string) int {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetHistogram().GetSampleCount())
}
