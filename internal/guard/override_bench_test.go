package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkOTPSendOverrides is BenchmarkOTPSend's per_phone case with 0 and
// with 20 emergency overrides in force that do not concern the number
// (other countries and prefixes): the overrides cost CPU in the send, and
// no round trip (the count is checked by Report).
func BenchmarkOTPSendOverrides(b *testing.B) {
	until := time.Now().Add(time.Hour)
	var twenty fakeOverrides
	for i := range 10 {
		twenty = append(twenty,
			guard.Override{Kind: guard.OverrideCountryLimit, Subject: []string{"NG", "GH", "PK", "EG", "ID", "KE", "TZ", "UG", "BD", "VN"}[i], Limit: 10, ExpiresAt: until},
			guard.Override{Kind: guard.OverridePrefixLimit, Subject: fmt.Sprintf("+23480%d", i), Limit: 10, ExpiresAt: until})
	}
	for _, c := range []struct {
		name string
		over fakeOverrides
	}{{"none", nil}, {"20_elsewhere", twenty}} {
		b.Run(c.name, func(b *testing.B) {
			s, rt, _ := redistest.Store(b)
			guard.WarmPhoneMetadata()
			p := guard.DefaultPolicies()
			p.FillDefaults()
			p.OTP.Cooldown = 0
			p.OTP.PerPhone = guard.Window{Limit: 1_000_000_000, Window: 10 * time.Minute}
			p.OTP.PerPrefix.Limit, p.OTP.PrefixDepths = 0, nil
			if err := p.Validate(); err != nil {
				b.Fatal(err)
			}
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s, Codes: s, Sender: guardtest.Sender{},
				HMACKey: []byte("0123456789abcdef0123456789abcdef"), Overrides: c.over})
			ctx := context.Background()
			i := 0
			for b.Loop() {
				if i == 0 {
					rt.Reset()
				}
				if _, err := otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+9198%08d", i)}); err != nil {
					b.Fatalf("send %d: %v", i, err)
				}
				i++
			}
			rt.Report(b, 2)
		})
	}
}
