package verifyapi_test

import (
	"errors"

	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/twilio/twilio-go/client"
	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// Two services of one deployment, as the policy file names them.
const (
	serviceA = "VA0000000000000000000000000000000a"
	serviceB = "VA0000000000000000000000000000000b"
	accountA = "AC0000000000000000000000000000000a"
	accountB = "AC0000000000000000000000000000000b"
	keyA     = "SK0000000000000000000000000000000a"
	secretA  = "secretOfServiceA0123456789"
	secretB  = "secretOfServiceB0123456789"
)

// startTwoServices boots a real otpguard (app.New, a real Redis) whose
// policy file names services A and B, their secrets in files.
func startTwoServices(t *testing.T) *otpguardtest.Server {
	t.Helper()
	return otpguardtest.StartWith(t, twoTenants(t, guard.DefaultPolicies()), nil)
}

// twoTenants is a policy naming services A and B, its secrets in files.
func twoTenants(t *testing.T, pol guard.Policies) guard.Policies {
	t.Helper()
	dir := t.TempDir()
	pol.Services = []guard.Service{
		{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
			Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, dir, "a", secretA)}}},
		{SID: serviceB, FriendlyName: "Bank", AccountSID: accountB,
			Credentials: []guard.ServiceCredential{{SID: accountB, SecretFile: writeSecret(t, dir, "b", secretB)}}},
	}
	return pol
}

// writeSecret writes a credential's secret file (with the trailing
// newline an editor leaves) and returns its path.
func writeSecret(t *testing.T, dir, name, secret string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rebased sends twilio-go's requests to otpguard: only the scheme and
// host of Twilio's URL change, as a team pointing the SDK at a test
// server does (BaseClient is twilio-go's seam for it).
type rebased struct {
	*client.Client
	base *url.URL
}

func (r rebased) SendRequest(method, rawURL string, data url.Values, headers map[string]any, body ...byte) (*http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	u.Scheme, u.Host = r.base.Scheme, r.base.Host
	return r.Client.SendRequest(method, u.String(), data, headers, body...)
}

// twilioVerify is twilio-go's Verify v2 client with the credential
// user:pass, its every answer recorded in rec.
func twilioVerify(t *testing.T, base, user, pass string, rec *recorder) *verify.ApiService {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{Credentials: client.NewCredentials(user, pass), HTTPClient: &http.Client{Transport: rec}}
	c.SetAccountSid(accountA)
	return verify.NewApiServiceWithClient(rebased{Client: c, base: u})
}

var codeIn = regexp.MustCompile(`\d{6}`)

// lastCode is the code of the last SMS to phone.
func lastCode(t *testing.T, srv *otpguardtest.Server, phone string) string {
	t.Helper()
	code, ok := sentCode(srv.Outbox, phone)
	if !ok {
		t.Fatalf("no SMS to %s", phone)
	}
	return code
}

// sentCode is the code of the last SMS to phone in the outbox, if any.
func sentCode(o *otpguardtest.Outbox, phone string) (string, bool) {
	sent := o.Sent()
	for i := len(sent) - 1; i >= 0; i-- {
		if sent[i].To == phone {
			return codeIn.FindString(sent[i].Body), true
		}
	}
	return "", false
}

// restError is err as twilio-go's *client.TwilioRestError.
func restError(t *testing.T, what string, err error) *client.TwilioRestError {
	t.Helper()
	var re *client.TwilioRestError
	if !errors.As(err, &re) {
		t.Fatalf("%s: %v (%T), want a *client.TwilioRestError", what, err, err)
	}
	return re
}

// TestTwilioGoVerify drives the Verify routes with twilio-go's own Verify
// v2 client, only its base address changed: a send, a wrong code, the
// right code, a cancel, a rate-limited send, the service; and the other
// service's credential refused everywhere on A's verification. Every
// answer it saw is then held to Twilio's OpenAPI document (a success) or
// the error body's schema.
func TestTwilioGoVerify(t *testing.T) {
	srv := startTwoServices(t)
	rec := &recorder{next: http.DefaultTransport}
	a := twilioVerify(t, srv.URL, keyA, secretA, rec)
	b := twilioVerify(t, srv.URL, accountB, secretB, rec)
	const phone, other = "+14155550142", "+14155550143"

	// Send.
	v, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phone).SetChannel("sms"))
	if err != nil {
		t.Fatalf("CreateVerification: %v", err)
	}
	if v.Sid == nil || !guard.ValidVerificationID(*v.Sid) || *v.Status != "pending" || *v.ServiceSid != serviceA ||
		*v.To != phone || *v.Channel != "sms" || *v.AccountSid != accountA {
		t.Fatalf("CreateVerification = %+v; want a pending sms verification of service A", v)
	}
	sid, code := *v.Sid, lastCode(t, srv, phone)

	// Service B's credential: A's verification does not exist for it.
	if _, err := b.FetchVerification(serviceB, sid); restError(t, "B fetches A's", err).Code != 20404 {
		t.Errorf("B fetches A's verification: %v, want 20404", err)
	}
	if _, err := b.CreateVerificationCheck(serviceB, (&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(code)); restError(t, "B checks A's", err).Code != 20404 {
		t.Errorf("B checks A's code: %v, want 20404", err)
	}
	if _, err := b.UpdateVerification(serviceB, sid, (&verify.UpdateVerificationParams{}).SetStatus("canceled")); restError(t, "B cancels A's", err).Code != 20404 {
		t.Errorf("B cancels A's verification: %v, want 20404", err)
	}
	if _, err := b.FetchVerification(serviceA, sid); restError(t, "B on A's route", err).Code != 20404 {
		t.Errorf("B's credential on A's route: %v, want 20404", err)
	}

	// A wrong code: 200, pending, not valid, one attempt spent (B's
	// tries above spent none: the right code still works below).
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	chk, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(wrong))
	if err != nil || *chk.Status != "pending" || *chk.Valid || *chk.Sid != sid {
		t.Fatalf("a wrong code: %+v, %v; want pending, not valid", chk, err)
	}
	// The right code, by the verification's SID.
	chk, err = a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetVerificationSid(sid).SetCode(code))
	if err != nil || *chk.Status != "approved" || !*chk.Valid || *chk.To != phone {
		t.Fatalf("the right code: %+v, %v; want approved", chk, err)
	}
	if got, err := a.FetchVerification(serviceA, sid); err != nil || *got.Status != "approved" {
		t.Errorf("FetchVerification after the check: %+v, %v; want approved", got, err)
	}
	// Approved: no longer checkable (Verify answers 404).
	if _, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(code)); restError(t, "check again", err).Code != 20404 {
		t.Errorf("checking an approved code again: %v, want 20404", err)
	}

	// Cancel.
	v, err = a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(other).SetChannel("sms"))
	if err != nil {
		t.Fatalf("CreateVerification to %s: %v", other, err)
	}
	canceled, err := a.UpdateVerification(serviceA, *v.Sid, (&verify.UpdateVerificationParams{}).SetStatus("canceled"))
	if err != nil || *canceled.Status != "canceled" {
		t.Fatalf("UpdateVerification canceled: %+v, %v", canceled, err)
	}
	if _, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(other).SetCode(lastCode(t, srv, other))); restError(t, "check canceled", err).Code != 20404 {
		t.Errorf("checking a canceled verification's code: %v, want 20404", err)
	}

	// A rate-limited send: the number's cooldown (otp.cooldown, 30 s) is
	// Verify's max send attempts.
	_, err = a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(other).SetChannel("sms"))
	if re := restError(t, "a send in the cooldown", err); re.Code != 60203 || re.Status != http.StatusTooManyRequests {
		t.Errorf("a send in the cooldown: %+v, want 60203 with 429", re)
	}

	// The service.
	s, err := a.FetchService(serviceA)
	if err != nil || *s.Sid != serviceA || *s.FriendlyName != "Shop" || s.CodeLength != 6 || *s.AccountSid != accountA {
		t.Errorf("FetchService: %+v, %v", s, err)
	}

	// A wrong secret; a channel not built yet.
	bad := twilioVerify(t, srv.URL, keyA, "wrongSecret0", rec)
	if _, err := bad.FetchService(serviceA); restError(t, "a wrong secret", err).Code != 20003 {
		t.Errorf("a wrong secret: %v, want 20003", err)
	}
	_, err = a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phone).SetChannel("whatsapp"))
	if re := restError(t, "whatsapp", err); re.Code != 60200 || re.Status != http.StatusBadRequest {
		t.Errorf("Channel whatsapp: %+v, want 60200 with 400", re)
	}

	sp := loadSpecs(t)
	seen := rec.exchanges()
	for _, x := range seen {
		sp.check(t, x)
	}
	if len(seen) < 15 {
		t.Errorf("%d answers recorded, want every call's", len(seen))
	}
}
