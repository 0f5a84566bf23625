package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/otpguard/otpguard/internal/guard"
)

type senderFunc func(context.Context, guard.Message) error

func (f senderFunc) Send(ctx context.Context, m guard.Message) error { return f(ctx, m) }

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

// TestTimedSenderOutcomes: each way a provider call ends is told apart, as
// the alert on failing sends needs (timeout and error may have left; the
// others surely did not).
func TestTimedSenderOutcomes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, providerSent},
		{&guard.Error{Code: guard.CodeInvalidDestination, Message: "no"}, providerRefused},
		{&guard.Error{Code: guard.CodeProviderUnavailable, Err: fmt.Errorf("401: %w", guard.ErrNotSent)}, providerRejected},
		{&guard.Error{Code: guard.CodeProviderUnavailable, Err: context.DeadlineExceeded}, providerTimeout},
		{&guard.Error{Code: guard.CodeProviderUnavailable, Err: &url.Error{Op: "Post", URL: "x", Err: timeoutErr{}}}, providerTimeout},
		{errors.New("500 from the provider"), providerError},
	} {
		m := NewMetrics()
		s := m.TimeSender("twilio", senderFunc(func(context.Context, guard.Message) error { return tc.err }))
		if err := s.Send(context.Background(), guard.Message{To: "+14155550100"}); err != tc.err {
			t.Errorf("Send returned %v, want the provider's %v", err, tc.err)
		}
		for _, o := range providerOutcomes {
			want := 0
			if o == tc.want {
				want = 1
			}
			h := m.smsCalls.provider
			if got := histCount(t, h, "twilio", o); got != want {
				t.Errorf("error %v: outcome %s counted %d, want %d", tc.err, o, got, want)
			}
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
