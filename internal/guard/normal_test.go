package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
)

// normalVolumes is a fakeVolumes that knows each country's normal
// conversion (guard.Normals).
type normalVolumes struct {
	fakeVolumes
	normal float64 // < 0: not known
	asked  int
}

func (f *normalVolumes) NormalConversion(context.Context, limit.Key, int64) (float64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.normal, f.normal >= 0, nil
}

// TestWatchJudgesAgainstTheCountrysNormal: a tally above min_rate alerts
// when it is below relative x the country's own normal conversion, and
// only with enough history (an unknown normal) and the rule on.
func TestWatchJudgesAgainstTheCountrysNormal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		normal   float64
		relative float64
		tally    guard.Tally
		alerts   bool
	}{
		{name: "85 % normal, 25 % now: alert", normal: 0.85, relative: 0.5, tally: guard.Tally{Sends: 40, Verifies: 10}, alerts: true},
		{name: "85 % normal, 60 % now: quiet", normal: 0.85, relative: 0.5, tally: guard.Tally{Sends: 40, Verifies: 24}},
		{name: "normal not known: min_rate only", normal: -1, relative: 0.5, tally: guard.Tally{Sends: 40, Verifies: 10}},
		{name: "a country normally at 30 %: min_rate is the higher", normal: 0.3, relative: 0.5, tally: guard.Tally{Sends: 40, Verifies: 10}},
		{name: "relative off", normal: 0.85, relative: 0, tally: guard.Tally{Sends: 40, Verifies: 10}},
		{name: "too few sends", normal: 0.85, relative: 0.5, tally: guard.Tally{Sends: 19, Verifies: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := &fakeConversions{tally: tc.tally}
			vol := &normalVolumes{normal: tc.normal}
			p := guard.DefaultPolicies()
			p.OTP.Cooldown = 0
			p.OTP.Conversion = guard.ConversionPolicy{Mode: guard.ConversionMonitor, MinRate: 0.2, MinSends: 20,
				BlockFor: time.Hour, Relative: tc.relative, HistoryMinSends: 200}
			p.FillDefaults()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
				Conversions: conv, Volumes: vol})
			t.Cleanup(otp.Close)
			ctx := context.Background()
			if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+447400123456"}); err != nil {
				t.Fatal(err)
			}
			if err := otp.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			conv.mu.Lock()
			claims := len(conv.claims)
			conv.mu.Unlock()
			if got := claims > 0; got != tc.alerts {
				t.Errorf("alerts: got %v (%d claims), want %v", got, claims, tc.alerts)
			}
			if vol.asked > 1 {
				t.Errorf("normal read %d times for one country in one batch, want at most 1", vol.asked)
			}
		})
	}
}
