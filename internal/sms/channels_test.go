package sms

import (
	"context"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

const (
	testWhatsAppFrom = "+14155550111"
	testContentSID   = "HX0123456789abcdef0123456789abcdef"
	testVoiceFrom    = "+14155550122"
	testCallback     = "https://otp.example.com/sms/status"
	callsAPI         = "/2010-04-01/Accounts/" + testSID + "/Calls.json"
)

// callCreated answers like Twilio does when it queues a call.
func callCreated(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusCreated, map[string]any{
		"sid": "CA0123456789abcdef0123456789abcdef", "status": "queued", "to": r.PostForm.Get("To"),
	})
}

func testAccount(f *fakeTwilio) TwilioOptions {
	return TwilioOptions{AccountSID: testSID, AuthToken: testToken, BaseURL: f.URL, StatusCallback: testCallback}
}

func TestWhatsAppSend(t *testing.T) {
	f := newFakeTwilio(t, created)
	w, err := NewWhatsApp(WhatsAppOptions{Account: testAccount(f), From: testWhatsAppFrom, ContentSID: testContentSID})
	if err != nil {
		t.Fatalf("NewWhatsApp() error = %v", err)
	}
	if err := w.Send(context.Background(), guard.Message{To: testTo, Body: testBody, Code: testCode, Channel: guard.ChannelWhatsApp}); err != nil {
		t.Fatalf("Send() error = %v", err)
	}
	got := f.seen()
	if len(got) != 1 {
		t.Fatalf("requests = %d, want 1", len(got))
	}
	want := twilioRequest{Method: http.MethodPost, Path: messagesAPI, ContentType: "application/x-www-form-urlencoded",
		User: testSID, Password: testToken, BasicAuth: true, Form: url.Values{
			"To":               {"whatsapp:" + testTo},
			"From":             {"whatsapp:" + testWhatsAppFrom},
			"ContentSid":       {testContentSID},
			"ContentVariables": {`{"1":"` + testCode + `"}`},
			"StatusCallback":   {testCallback},
		}}
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestWhatsAppRefusal(t *testing.T) {
	f := newFakeTwilio(t, twilioFails(400, 63024, "Invalid message recipient "+testTo+" for code "+testCode))
	w, err := NewWhatsApp(WhatsAppOptions{Account: testAccount(f), From: "whatsapp:" + testWhatsAppFrom, ContentSID: testContentSID})
	if err != nil {
		t.Fatalf("NewWhatsApp() error = %v", err)
	}
	err = w.Send(context.Background(), guard.Message{To: testTo, Body: testBody, Code: testCode})
	_ = checkSafeError(t, err, problem.CodeInvalidDestination)
}

func TestNewWhatsAppChecks(t *testing.T) {
	_, err := NewWhatsApp(WhatsAppOptions{Account: TwilioOptions{AccountSID: testSID, AuthToken: testToken}, From: "sender", ContentSID: "MG1"})
	if err == nil || !strings.Contains(err.Error(), "from") || !strings.Contains(err.Error(), "content SID") {
		t.Errorf("NewWhatsApp() error = %v, want both the sender and the content SID named", err)
	}
}

func TestVoiceSend(t *testing.T) {
	tests := []struct {
		name, locale, body, wantLang, wantText string
	}{
		{name: "english", locale: "", body: testBody, wantLang: "en-US",
			wantText: "Your otpguard code is 4, 9, 3, 8, 1, 7"},
		{name: "a base language with a voice", locale: "fr", body: "Votre code : " + testCode, wantLang: "fr-FR",
			wantText: "Votre code : 4, 9, 3, 8, 1, 7"},
		{name: "a region", locale: "pt-BR", body: testCode, wantLang: "pt-BR", wantText: "4, 9, 3, 8, 1, 7"},
		{name: "no voice: en-US", locale: "hi", body: testCode, wantLang: "en-US", wantText: "4, 9, 3, 8, 1, 7"},
		{name: "markup is escaped", locale: "en", body: `<Play>x</Play> & "` + testCode + `"`, wantLang: "en-US",
			wantText: `<Play>x</Play> & "4, 9, 3, 8, 1, 7"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTwilio(t, callCreated)
			v, err := NewVoice(VoiceOptions{Account: testAccount(f), From: testVoiceFrom})
			if err != nil {
				t.Fatalf("NewVoice() error = %v", err)
			}
			if err := v.Send(context.Background(), guard.Message{To: testTo, Body: tt.body, Code: testCode, Locale: tt.locale}); err != nil {
				t.Fatalf("Send() error = %v", err)
			}
			got := f.seen()
			if len(got) != 1 {
				t.Fatalf("requests = %d, want 1", len(got))
			}
			r := got[0]
			if r.Path != callsAPI || r.Method != http.MethodPost || r.User != testSID || r.Password != testToken {
				t.Errorf("request %s %s as %s, want POST %s as the account", r.Method, r.Path, r.User, callsAPI)
			}
			keys := make([]string, 0, len(r.Form))
			for k := range r.Form {
				keys = append(keys, k)
			}
			if diff := cmp.Diff([]string{"From", "StatusCallback", "To", "Twiml"}, slices.Sorted(slices.Values(keys))); diff != "" {
				t.Errorf("form fields (-want +got):\n%s", diff)
			}
			if r.Form.Get("To") != testTo || r.Form.Get("From") != testVoiceFrom || r.Form.Get("StatusCallback") != testCallback {
				t.Errorf("To, From, StatusCallback = %q, %q, %q", r.Form.Get("To"), r.Form.Get("From"), r.Form.Get("StatusCallback"))
			}
			// What Twilio reads: Response > Say, Pause, Say; the text
			// decoded back is the body with the digits spaced.
			var doc struct {
				XMLName xml.Name
				Verbs   []struct {
					XMLName  xml.Name
					Language string `xml:"language,attr"`
					Length   string `xml:"length,attr"`
					Text     string `xml:",chardata"`
				} `xml:",any"`
			}
			if err := xml.Unmarshal([]byte(r.Form.Get("Twiml")), &doc); err != nil {
				t.Fatalf("Twiml %q: %v", r.Form.Get("Twiml"), err)
			}
			if doc.XMLName.Local != "Response" || len(doc.Verbs) != 3 {
				t.Fatalf("Twiml = %s, want <Response> with Say, Pause, Say", r.Form.Get("Twiml"))
			}
			for i, name := range []string{"Say", "Pause", "Say"} {
				if doc.Verbs[i].XMLName.Local != name {
					t.Errorf("verb %d = %s, want %s", i, doc.Verbs[i].XMLName.Local, name)
				}
			}
			for _, i := range []int{0, 2} {
				if s := doc.Verbs[i]; s.Language != tt.wantLang || s.Text != tt.wantText {
					t.Errorf("Say %d = %q in %q, want %q in %q", i, s.Text, s.Language, tt.wantText, tt.wantLang)
				}
			}
			if strings.Contains(r.Form.Get("Twiml"), "<Play>") {
				t.Errorf("Twiml %s: the text's markup was not escaped", r.Form.Get("Twiml"))
			}
		})
	}
}

func TestVoiceRefusal(t *testing.T) {
	f := newFakeTwilio(t, twilioFails(400, 13224, "Invalid number "+testTo+": said 4, 9, 3, 8, 1, 7"))
	v, err := NewVoice(VoiceOptions{Account: testAccount(f), From: testVoiceFrom})
	if err != nil {
		t.Fatalf("NewVoice() error = %v", err)
	}
	err = v.Send(context.Background(), guard.Message{To: testTo, Body: testBody, Code: testCode})
	ge := checkSafeError(t, err, problem.CodeInvalidDestination)
	if strings.Contains(ge.Err.Error(), "4, 9, 3") {
		t.Errorf("error %q quotes the spaced code", ge.Err)
	}
}
