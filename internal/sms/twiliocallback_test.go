package sms

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"testing"

	"github.com/twilio/twilio-go/client"
)

const callbackURL = "https://otpguard.example/sms/status"

// twilioSignature signs a form as Twilio does, by hand: base64(HMAC-SHA1(
// token, url + name1 + value1 + name2 + value2 ...)), names sorted, the
// first value of each.
func twilioSignature(token, u string, form url.Values) string {
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	sort.Strings(names)
	s := u
	for _, k := range names {
		s += k + form.Get(k)
	}
	m := hmac.New(sha1.New, []byte(token))
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestTwilioCallbackVerify(t *testing.T) {
	form := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "MessageStatus": {"delivered"},
		"To": {"+919800000000"}, "AccountSid": {"AC0123"}, "ApiVersion": {"2010-04-01"}}
	valid := twilioSignature(testToken, callbackURL, form)

	// The hand-made signature is the one twilio-go's validator accepts, so
	// the cases below test the real check, not the test's idea of it.
	params := map[string]string{}
	for k := range form {
		params[k] = form.Get(k)
	}
	if v := client.NewRequestValidator(testToken); !v.Validate(callbackURL, params, valid) {
		t.Fatal("twilio-go's validator refuses the test's signature")
	}

	twice := url.Values{"MessageSid": {"SM1", "SM2"}, "MessageStatus": {"delivered"}}
	configured := TwilioCallback{URL: callbackURL, AuthToken: testToken}
	for _, tc := range []struct {
		name string
		cb   TwilioCallback
		form url.Values
		sig  string
		want bool
	}{
		{"valid signature", configured, form, valid, true},
		{"a repeated name is signed with its first value", configured, twice, twilioSignature(testToken, callbackURL, twice), true},
		{"forged signature", configured, form, twilioSignature("not-the-token", callbackURL, form), false},
		{"signature of another URL", configured, form, twilioSignature(testToken, "https://evil.example/sms/status", form), false},
		{"tampered body", configured, url.Values{"MessageSid": {"SMx"}, "MessageStatus": {"delivered"}, "To": {"+919800000000"},
			"AccountSid": {"AC0123"}, "ApiVersion": {"2010-04-01"}}, valid, false},
		{"no signature", configured, form, "", false},
		{"no auth token", TwilioCallback{URL: callbackURL}, form, twilioSignature("", callbackURL, form), false},
		{"no URL", TwilioCallback{AuthToken: testToken}, form, twilioSignature(testToken, "", form), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.sig != "" {
				h.Set("X-Twilio-Signature", tc.sig)
			}
			if got := tc.cb.Verify(h, tc.form); got != tc.want {
				t.Errorf("Verify: got %v, want %v", got, tc.want)
			}
		})
	}
}
