package sms

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

// TestTimedOutcomes: each way a provider call ends is told apart, as the
// alert on failing sends needs (timeout and error may have left; the
// others surely did not).
func TestTimedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"sent", nil, OutcomeSent},
		{"refused number", &problem.Error{Code: problem.CodeInvalidDestination, Message: "no"}, OutcomeRefused},
		{"not sent", &problem.Error{Code: problem.CodeProviderUnavailable, Err: fmt.Errorf("401: %w", guard.ErrNotSent)}, OutcomeRejected},
		{"deadline", &problem.Error{Code: problem.CodeProviderUnavailable, Err: context.DeadlineExceeded}, OutcomeTimeout},
		{"net timeout", &problem.Error{Code: problem.CodeProviderUnavailable, Err: &url.Error{Op: "Post", URL: "x", Err: timeoutErr{}}}, OutcomeTimeout},
		{"other error", errors.New("500 from the provider"), OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			s := Timed(guardtest.Sender{SendFn: func(context.Context, guard.Message) error { return tc.err }},
				func(outcome string, _ time.Duration) { got = append(got, outcome) })
			if err := s.Send(context.Background(), guard.Message{To: "+14155550100"}); err != tc.err {
				t.Errorf("Send returned %v, want the provider's %v", err, tc.err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("observed %v, want one %s", got, tc.want)
			}
		})
	}
}
