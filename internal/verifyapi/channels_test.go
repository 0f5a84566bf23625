package verifyapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// fakeTwilioAPI is a fake of Twilio's Messages and Calls APIs: it keeps
// each request's path and form and answers as Twilio does when it queues
// one.
type fakeTwilioAPI struct {
	*httptest.Server
	mu   sync.Mutex
	seen []posted
}

type posted struct {
	path string
	form url.Values
}

func newFakeTwilioAPI(t *testing.T) *fakeTwilioAPI {
	t.Helper()
	f := &fakeTwilioAPI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake Twilio: %v", err)
		}
		f.mu.Lock()
		f.seen = append(f.seen, posted{path: r.URL.Path, form: r.PostForm})
		f.mu.Unlock()
		sid := "SM0123456789abcdef0123456789abcdef"
		if strings.HasSuffix(r.URL.Path, "/Calls.json") {
			sid = "CA0123456789abcdef0123456789abcdef"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": sid, "status": "queued", "to": r.PostForm.Get("To")})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeTwilioAPI) last() posted {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return posted{}
	}
	return f.seen[len(f.seen)-1]
}

// TestTwilioGoVerifyChannels: with the WhatsApp and voice senders set,
// twilio-go's Channel whatsapp reaches Twilio's Messages API as a
// template with the code as its variable, and the code verifies; Channel
// call reaches the Calls API with TwiML; each answer names its channel.
// Without a voice number, call is 60200 and nothing is sent.
func TestTwilioGoVerifyChannels(t *testing.T) {
	twilio := newFakeTwilioAPI(t)
	dir := t.TempDir()
	pol := guard.DefaultPolicies()
	pol.Services = []guard.Service{{SID: serviceA, FriendlyName: "Shop", AccountSID: accountA,
		Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: writeSecret(t, dir, "a", secretA)}}}}
	account := config.TwilioConfig{AccountSID: "AC00000000000000000000000000000001", AuthToken: "token0123456789",
		From: "+14155550100", BaseURL: twilio.URL}
	withChannels := account
	withChannels.WhatsAppFrom, withChannels.WhatsAppContentSID = "+14155550111", "HX0123456789abcdef0123456789abcdef"
	withChannels.VoiceFrom = "+14155550122"
	srv := otpguardtest.StartWith(t, pol, func(c *config.Config) { c.SMS, c.Twilio = "twilio", withChannels })
	rec := &recorder{next: http.DefaultTransport}
	a := twilioVerify(t, srv.URL, keyA, secretA, rec)

	const waPhone, callPhone = "+14155550190", "+14155550191"
	v, err := a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(waPhone).SetChannel("whatsapp"))
	if err != nil {
		t.Fatalf("CreateVerification whatsapp: %v", err)
	}
	if *v.Channel != "whatsapp" {
		t.Errorf("channel = %s, want whatsapp", *v.Channel)
	}
	got := twilio.last()
	var vars map[string]string
	if err := json.Unmarshal([]byte(got.form.Get("ContentVariables")), &vars); err != nil || len(vars["1"]) != 6 {
		t.Fatalf("ContentVariables = %q (%v), want {\"1\": the code}", got.form.Get("ContentVariables"), err)
	}
	if !strings.HasSuffix(got.path, "/Messages.json") || got.form.Get("To") != "whatsapp:"+waPhone ||
		got.form.Get("From") != "whatsapp:+14155550111" || got.form.Get("ContentSid") != withChannels.WhatsAppContentSID || got.form.Get("Body") != "" {
		t.Errorf("Twilio got %s %v, want a WhatsApp template message", got.path, got.form)
	}
	chk, err := a.CreateVerificationCheck(serviceA, (&verify.CreateVerificationCheckParams{}).SetTo(waPhone).SetCode(vars["1"]))
	if err != nil || *chk.Status != "approved" || *chk.Channel != "whatsapp" {
		t.Errorf("checking the WhatsApp code: %+v, %v; want approved by whatsapp", chk, err)
	}
	// The record keeps its channel: a fetch says whatsapp too.
	if f, err := a.FetchVerification(serviceA, *v.Sid); err != nil || *f.Channel != "whatsapp" || (*f.SendCodeAttempts)[0].(map[string]any)["channel"] != "whatsapp" {
		t.Errorf("fetching the WhatsApp verification: %+v, %v; want channel whatsapp", f, err)
	}

	v, err = a.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(callPhone).SetChannel("call").SetLocale("fr"))
	if err != nil {
		t.Fatalf("CreateVerification call: %v", err)
	}
	if *v.Channel != "call" {
		t.Errorf("channel = %s, want call", *v.Channel)
	}
	got = twilio.last()
	if !strings.HasSuffix(got.path, "/Calls.json") || got.form.Get("To") != callPhone || got.form.Get("From") != "+14155550122" ||
		!strings.Contains(got.form.Get("Twiml"), `<Say language="fr-FR">`) {
		t.Errorf("Twilio got %s %v, want a call saying the code in French", got.path, got.form)
	}

	sp := loadSpecs(t)
	for _, x := range rec.exchanges() {
		sp.check(t, x)
	}

	// A deployment without a voice number.
	noVoice := otpguardtest.StartWith(t, pol, func(c *config.Config) { c.SMS, c.Twilio = "twilio", account })
	b := twilioVerify(t, noVoice.URL, keyA, secretA, rec)
	twilio.mu.Lock()
	before := len(twilio.seen)
	twilio.mu.Unlock()
	_, err = b.CreateVerification(serviceA, (&verify.CreateVerificationParams{}).SetTo(callPhone).SetChannel("call"))
	if re := restError(t, "call off", err); re.Code != 60200 || re.Status != http.StatusBadRequest || !strings.Contains(re.Message, "off") {
		t.Errorf("Channel call without a voice number: %+v, want 60200 with 400 saying it is off", re)
	}
	twilio.mu.Lock()
	defer twilio.mu.Unlock()
	if len(twilio.seen) != before {
		t.Errorf("Twilio got %d requests for a refused call, want none", len(twilio.seen)-before)
	}
}
