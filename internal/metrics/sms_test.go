package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestProviderCalls: every outcome named starts at zero, and a call is
// counted under its provider and outcome only.
func TestProviderCalls(t *testing.T) {
	outcomes := []string{"sent", "timeout", "error"}
	m := New()
	observe := m.ProviderCalls("twilio", outcomes)
	for _, o := range outcomes {
		if got := histCount(t, m.smsCalls.provider, "twilio", o); got != 0 {
			t.Errorf("outcome %s before any call: %d, want 0", o, got)
		}
	}
	observe("timeout", time.Second)
	for _, o := range outcomes {
		want := 0
		if o == "timeout" {
			want = 1
		}
		if got := histCount(t, m.smsCalls.provider, "twilio", o); got != want {
			t.Errorf("outcome %s counted %d, want %d", o, got, want)
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
