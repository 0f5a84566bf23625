package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// waitRefusal is a provider's refusal that says how long to wait.
type waitRefusal struct{ wait time.Duration }

func (w waitRefusal) Error() string               { return "429" }
func (w waitRefusal) Unwrap() error               { return guard.ErrNotSent }
func (w waitRefusal) ProviderWait() time.Duration { return w.wait }

// TestProviderRefusalAnswer: what a send the provider failed gives back
// and tells. A refusal (ErrNotSent) of the message gives the number's
// cooldown and count back and says when to try again: the provider's
// Retry-After within a minute, else ProviderRetryAfter; a refusal of the
// number, or a failure that may have sent, keeps them spent. The
// address's count stays spent every time.
func TestProviderRefusalAnswer(t *testing.T) {
	unavailable := func(err error) error {
		return &problem.Error{Code: problem.CodeProviderUnavailable, Message: "provider", Err: err}
	}
	tests := []struct {
		name      string
		err       error
		code      problem.Code
		back      bool
		wantRetry time.Duration
	}{
		{"refused, the provider's wait", unavailable(waitRefusal{7 * time.Second}), problem.CodeProviderUnavailable, true, 7 * time.Second},
		{"refused, a wait past the bound", unavailable(waitRefusal{time.Hour}), problem.CodeProviderUnavailable, true, time.Minute},
		{"refused, no wait", unavailable(guard.ErrNotSent), problem.CodeProviderUnavailable, true, guard.ProviderRetryAfter},
		{"refused, not a problem.Error", guard.ErrNotSent, problem.CodeProviderUnavailable, true, guard.ProviderRetryAfter},
		{"may have sent", unavailable(context.DeadlineExceeded), problem.CodeProviderUnavailable, false, 0},
		{"the number refused", &problem.Error{Code: problem.CodeInvalidDestination, Err: guard.ErrNotSent}, problem.CodeInvalidDestination, false, 0},
	}
	const phone, ip = "+919800000000", "192.0.2.1"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.FillDefaults()
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, HMACKey: outageHMACKey,
				Sender: guardtest.Sender{SendFn: func(context.Context, guard.Message) error { return tt.err }}})
			_, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone, ClientIP: ip})
			wantCode(t, err, tt.code)
			var e *problem.Error
			if !errors.As(err, &e) || e.RetryAfter != tt.wantRetry {
				t.Errorf("RetryAfter = %v, want %v", e.RetryAfter, tt.wantRetry)
			}
			want := int64(1)
			if tt.back {
				want = 0
			}
			for _, k := range guard.PhoneCounterKeys(phone)[:2] { // an SMS's: its cooldown and window
				if got := st.Count(k); got != want {
					t.Errorf("%s = %d, want %d", k.Name, got, want)
				}
			}
			if got := st.Count(limit.Key{Space: "otp:ip", ID: ip, Name: "sends"}); got != 1 {
				t.Errorf("address count = %d, want 1 (it stays spent)", got)
			}
		})
	}
}
