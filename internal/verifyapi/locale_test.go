package verifyapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// fakeMessages is a fake of Twilio's Messages API (the 2010-04-01
// resource otpguard's Twilio sender posts to): it keeps each message's
// To and Body and answers as Twilio does when it queues one.
type fakeMessages struct {
	*httptest.Server
	mu   sync.Mutex
	sent []guard.Message
}

func newFakeMessages(t *testing.T) *fakeMessages {
	t.Helper()
	f := &fakeMessages{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !regexp.MustCompile(`^/2010-04-01/Accounts/AC[0-9a-f]{32}/Messages\.json$`).MatchString(r.URL.Path) {
			t.Errorf("fake Twilio: %s %s, want a POST of a message", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake Twilio: %v", err)
		}
		f.mu.Lock()
		f.sent = append(f.sent, guard.Message{To: r.PostForm.Get("To"), Body: r.PostForm.Get("Body")})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": "SM0123456789abcdef0123456789abcdef", "status": "queued",
			"to": r.PostForm.Get("To"), "body": r.PostForm.Get("Body")})
	}))
	t.Cleanup(f.Close)
	return f
}

// to is the bodies of the messages to phone, in order.
func (f *fakeMessages) to(phone string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.sent {
		if m.To == phone {
			out = append(out, m.Body)
		}
	}
	return out
}

// TestTwilioGoVerifyLocale: twilio-go's SetLocale reaches the SMS that
// otpguard's Twilio sender hands to (a fake of) Twilio: Spanish from the
// built-in translation, the policy's Portuguese for pt-BR (its base
// language), otp.message for a listed locale without a template; the code
// in the Spanish text verifies. A locale Verify does not list is 60200
// with 400 and sends nothing.
func TestTwilioGoVerifyLocale(t *testing.T) {
	twilio := newFakeMessages(t)
	dir := t.TempDir()
	pol := guard.DefaultPolicies()
	pol.OTP.Messages = map[string]string{"pt": "Seu código é {code}"}
	pol.Services = []guard.Service{{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
		Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, dir, "a", secretA)}}}}
	srv := otpguardtest.StartWith(t, pol, func(c *config.Config) {
		c.SMS = "twilio"
		c.Twilio = config.TwilioConfig{AccountSID: "AC00000000000000000000000000000001", AuthToken: "token0123456789",
			From: "+14155550100", BaseURL: twilio.URL}
	})
	rec := &recorder{next: http.DefaultTransport}
	a := twilioVerify(t, srv.URL, keyA, secretA, rec)

	for _, tc := range []struct {
		phone, locale string
		want          *regexp.Regexp
	}{
		{"+14155550180", "es", regexp.MustCompile(`^Tu código de verificación es (\d{6})$`)},
		{"+14155550181", "pt-BR", regexp.MustCompile(`^Seu código é (\d{6})$`)},
		{"+14155550182", "ja", regexp.MustCompile(`^Your verification code is (\d{6})$`)},
	} {
		v, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(tc.phone).SetChannel("sms").SetLocale(tc.locale))
		if err != nil {
			t.Fatalf("CreateVerification in %s: %v", tc.locale, err)
		}
		bodies := twilio.to(tc.phone)
		if len(bodies) != 1 || !tc.want.MatchString(bodies[0]) {
			t.Fatalf("Locale %s: Twilio got %q, want one message matching %s", tc.locale, bodies, tc.want)
		}
		if tc.locale != "es" {
			continue
		}
		code := tc.want.FindStringSubmatch(bodies[0])[1]
		chk, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetVerificationSid(*v.Sid).SetCode(code))
		if err != nil || *chk.Status != "approved" {
			t.Errorf("checking the code of the Spanish SMS: %+v, %v; want approved", chk, err)
		}
	}

	const phone = "+14155550183"
	for _, locale := range []string{"es-MX", "klingon"} {
		_, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(phone).SetChannel("sms").SetLocale(locale))
		if re := restError(t, "Locale "+locale, err); re.Code != 60200 || re.Status != http.StatusBadRequest ||
			!regexp.MustCompile(`^Locale "`+locale+`" is not a supported locale`).MatchString(re.Message) {
			t.Errorf("Locale %s: %+v, want 60200 with 400 naming Locale", locale, re)
		}
	}
	if got := twilio.to(phone); len(got) != 0 {
		t.Errorf("Twilio got %q for refused locales, want nothing", got)
	}
	if n := srv.Outbox.Count(); n != 0 {
		t.Errorf("%d SMS in the outbox, want every one through Twilio", n)
	}
	sp := loadSpecs(t)
	for _, x := range rec.exchanges() {
		sp.check(t, x)
	}
}

// TestTwilioGoVerifyLocaleFromNumber: without Locale, the SMS that (a fake
// of) Twilio receives is in the language of the number's country, as
// Verify writes it: German for a +49 number, French for +33, the policy's
// Portuguese for +55 (pt-BR, its base language's text); otp.message for a
// country of no text (+44) or none listed (+91). The answer's locale says
// which; Locale, when given, wins over the number.
func TestTwilioGoVerifyLocaleFromNumber(t *testing.T) {
	twilio := newFakeMessages(t)
	pol := guard.DefaultPolicies()
	pol.OTP.Messages = map[string]string{"pt": "Seu código é {code}"}
	pol.Services = []guard.Service{{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
		Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, t.TempDir(), "a", secretA)}}}}
	srv := otpguardtest.StartWith(t, pol, func(c *config.Config) {
		c.SMS = "twilio"
		c.Twilio = config.TwilioConfig{AccountSID: "AC00000000000000000000000000000001", AuthToken: "token0123456789",
			From: "+14155550100", BaseURL: twilio.URL}
	})
	rec := &recorder{next: http.DefaultTransport}
	a := twilioVerify(t, srv.URL, keyA, secretA, rec)
	for _, tc := range []struct {
		phone, locale, wantLocale string
		want                      *regexp.Regexp
	}{
		{"+4915123456789", "", "de", regexp.MustCompile(`^Ihr Bestätigungscode lautet \d{6}$`)},
		{"+33612345678", "", "fr", regexp.MustCompile(`^Votre code de vérification est \d{6}$`)},
		{"+5511987654321", "", "pt", regexp.MustCompile(`^Seu código é \d{6}$`)},
		{"+447400123456", "", "en", regexp.MustCompile(`^Your verification code is \d{6}$`)},
		{"+919812345678", "", "en", regexp.MustCompile(`^Your verification code is \d{6}$`)},
		{"+4915123456780", "es", "es", regexp.MustCompile(`^Tu código de verificación es \d{6}$`)},
	} {
		_, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(tc.phone).SetChannel("sms").SetLocale(tc.locale))
		if err != nil {
			t.Fatalf("CreateVerification to %s: %v", tc.phone, err)
		}
		if bodies := twilio.to(tc.phone); len(bodies) != 1 || !tc.want.MatchString(bodies[0]) {
			t.Errorf("%s, Locale %q: Twilio got %q, want one message matching %s", tc.phone, tc.locale, bodies, tc.want)
		}
		seen := rec.exchanges()
		var got struct {
			Locale string `json:"locale"`
		}
		if err := json.Unmarshal(seen[len(seen)-1].body, &got); err != nil || got.Locale != tc.wantLocale {
			t.Errorf("%s, Locale %q: the answer's locale %q (%v), want %q", tc.phone, tc.locale, got.Locale, err, tc.wantLocale)
		}
	}
	sp := loadSpecs(t)
	for _, x := range rec.exchanges() {
		sp.check(t, x)
	}
}
