package verifyapi_test

import (
	"net/http"
	"regexp"
	"testing"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// TestTwilioGoServicePolicy: a service's otp: block is what its Verify
// routes send and check under, through twilio-go against a real otpguard
// sending to a fake of Twilio: service A (code_length 8, its own text,
// SMS only) gets an 8-digit code in its text at Twilio, its service
// answers code_length 8, its check takes the 8 digits, and WhatsApp,
// which the deployment offers, is 60200 for it with nothing sent;
// service B, without a block, keeps the deployment's 6 digits.
func TestTwilioGoServicePolicy(t *testing.T) {
	twilio := newFakeTwilioAPI(t)
	dir := t.TempDir()
	pol := guard.DefaultPolicies()
	pol.Services = []guard.Service{
		{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
			Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, dir, "a", secretA)}},
			OTP:         &guard.ServicePolicy{CodeLength: 8, Message: "Shop: {code}", Channels: []string{guard.ChannelSMS}}},
		{SID: serviceB, FriendlyName: "Bank", AccountSID: accountB,
			Credentials: []guard.ServiceCredential{{SID: accountB, SecretFile: writeSecret(t, dir, "b", secretB)}}},
	}
	tw := config.TwilioConfig{AccountSID: "AC00000000000000000000000000000001", AuthToken: "token0123456789",
		From: "+14155550100", BaseURL: twilio.URL, WhatsAppFrom: "+14155550111", WhatsAppContentSID: "HX0123456789abcdef0123456789abcdef"}
	srv := otpguardtest.StartWith(t, pol, func(c *config.Config) { c.SMS, c.Twilio = "twilio", tw })
	rec := &recorder{next: http.DefaultTransport}
	a := twilioVerify(t, srv.URL, keyA, secretA, rec)
	b := twilioVerify(t, srv.URL, accountB, secretB, rec)
	const phoneA, phoneB = "+14155550230", "+14155550231"

	if _, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phoneA).SetChannel("sms")); err != nil {
		t.Fatalf("A's send: %v", err)
	}
	body := twilio.last().form.Get("Body")
	m := regexp.MustCompile(`^Shop: (\d{8})$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("Twilio got %q for A, want its text with an 8-digit code", body)
	}
	if s, err := a.FetchService(serviceA); err != nil || s.CodeLength != 8 {
		t.Errorf("A's service: %+v, %v; want code_length 8", s, err)
	}
	chk, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(phoneA).SetCode(m[1]))
	if err != nil || *chk.Status != "approved" {
		t.Fatalf("A's check of the 8 digits: %+v, %v; want approved", chk, err)
	}

	twilio.mu.Lock()
	before := len(twilio.seen)
	twilio.mu.Unlock()
	_, err = a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phoneA).SetChannel("whatsapp"))
	if re := restError(t, "A's whatsapp", err); re.Code != 60200 || re.Status != http.StatusBadRequest {
		t.Errorf("WhatsApp for A, which offers SMS only: %+v, want 60200 with 400", re)
	}
	twilio.mu.Lock()
	if len(twilio.seen) != before {
		t.Errorf("Twilio got %d requests for a refused channel, want none", len(twilio.seen)-before)
	}
	twilio.mu.Unlock()

	if _, err := b.CreateVerification(serviceB, (&verify.CreateVerificationParams{}).SetTo(phoneB).SetChannel("sms")); err != nil {
		t.Fatalf("B's send: %v", err)
	}
	if body := twilio.last().form.Get("Body"); !regexp.MustCompile(`^Your verification code is \d{6}$`).MatchString(body) {
		t.Errorf("Twilio got %q for B, want the deployment's text with 6 digits", body)
	}
	if s, err := b.FetchService(serviceB); err != nil || s.CodeLength != 6 {
		t.Errorf("B's service: %+v, %v; want code_length 6", s, err)
	}

	sp := loadSpecs(t)
	for _, x := range rec.exchanges() {
		sp.check(t, x)
	}
}
