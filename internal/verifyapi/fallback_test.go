package verifyapi_test

import (
	"net/http"
	"testing"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// TestTwilioGoVerifyFallback: with otp.fallback_channel whatsapp, an SMS
// verification the country velocity rule holds is refused with the
// channel open in details.fallback, as twilio-go's TwilioRestError
// carries it: a 428001 beside its challenge (challenges on), a 20429
// (off). The same create with Channel=whatsapp is then a pending
// verification whose code approves. Without the fallback, the 428001's
// details name none. Every answer holds to the specs.
func TestTwilioGoVerifyFallback(t *testing.T) {
	for _, tc := range []struct {
		name               string
		challenges         bool
		fallback           string
		wantCode, wantHTTP int
	}{
		{name: "challenged", challenges: true, fallback: guard.ChannelWhatsApp, wantCode: 428001, wantHTTP: http.StatusPreconditionRequired},
		{name: "refused", fallback: guard.ChannelWhatsApp, wantCode: 20429, wantHTTP: http.StatusTooManyRequests},
		{name: "no fallback", challenges: true, wantCode: 428001, wantHTTP: http.StatusPreconditionRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pol := guard.DefaultPolicies()
			pol.Services = []guard.Service{{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
				Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, dir, "a", secretA)}}}}
			pol.OTP.Cooldown = 0
			pol.OTP.CountryVelocity.Floor = 1
			pol.OTP.FallbackChannel = tc.fallback
			if !tc.challenges {
				pol.OTP.Challenge.Type = guard.ChallengeOff
			}
			srv := otpguardtest.StartWith(t, pol, func(c *config.Config) {
				c.Twilio.WhatsAppFrom, c.Twilio.WhatsAppContentSID = "+14155550111", "HX0123456789abcdef0123456789abcdef"
			})
			rec := &recorder{next: http.DefaultTransport}
			a := twilioVerify(t, srv.URL, keyA, secretA, rec)
			create := func(phone, channel string) (*verify.VerifyV2Verification, error) {
				return a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phone).SetChannel(channel))
			}
			if _, err := create("+14155550180", "sms"); err != nil {
				t.Fatalf("first SMS: %v", err)
			}
			const held = "+14155550181"
			_, err := create(held, "sms")
			re := restError(t, "the held SMS", err)
			if re.Code != tc.wantCode || re.Status != tc.wantHTTP {
				t.Fatalf("the held SMS: %d %d, want %d %d", re.Code, re.Status, tc.wantCode, tc.wantHTTP)
			}
			fb, _ := re.Details["fallback"].(map[string]any)
			if got, _ := fb["channel"].(string); got != tc.fallback {
				t.Fatalf("the held SMS's details %v offer %q, want %q", re.Details, got, tc.fallback)
			}
			if _, ok := re.Details["challenge"]; ok != tc.challenges {
				t.Errorf("the held SMS's details %v: a challenge %v, want %v", re.Details, ok, tc.challenges)
			}
			if tc.fallback != "" {
				v, err := create(held, tc.fallback)
				if err != nil {
					t.Fatalf("the same by %s: %v", tc.fallback, err)
				}
				if *v.Channel != tc.fallback || *v.Status != "pending" {
					t.Errorf("the same by %s: channel %s, status %s; want %s, pending", tc.fallback, *v.Channel, *v.Status, tc.fallback)
				}
				chk, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(held).SetCode(lastCode(t, srv, held)))
				if err != nil || *chk.Status != "approved" {
					t.Errorf("checking the %s code: %+v, %v; want approved", tc.fallback, chk, err)
				}
			}
			sp := loadSpecs(t)
			for _, x := range rec.exchanges() {
				sp.check(t, x)
			}
		})
	}
}
