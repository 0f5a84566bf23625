package verifyapi_test

import (
	"strings"
	"testing"
)

// TestSpecCheckCatches: the holding of answers to the specs finds what it
// is there to find, so that TestTwilioGoVerify's passing means something.
func TestSpecCheckCatches(t *testing.T) {
	sp := loadSpecs(t)
	const svc = "/v2/Services/VA0000000000000000000000000000000a"
	good := `{"sid":"VE0123456789abcdef0123456789abcdef","service_sid":"VA0000000000000000000000000000000a",
		"account_sid":"AC0000000000000000000000000000000a","to":"+14155550142","channel":"sms","status":"pending",
		"valid":false,"lookup":{},"amount":null,"payee":null,"send_code_attempts":[],
		"date_created":"2026-01-02T03:04:05Z","date_updated":"2026-01-02T03:04:05Z","sna":null,"url":null}`
	for _, tc := range []struct {
		name string
		x    exchange
		want string // "" none; else a problem containing it
	}{
		{"a good verification", exchange{"POST", svc + "/Verifications", 201, []byte(good)}, ""},
		{"a sid of the wrong kind", exchange{"POST", svc + "/Verifications", 201,
			[]byte(strings.Replace(good, `"VE0123`, `"XX0123`, 1))}, "Twilio's schema"},
		{"a channel Verify does not have", exchange{"POST", svc + "/Verifications", 201,
			[]byte(strings.Replace(good, `"sms"`, `"pigeon"`, 1))}, "Twilio's schema"},
		{"a field left out", exchange{"POST", svc + "/Verifications", 201,
			[]byte(strings.Replace(good, `"lookup":{},`, ``, 1))}, "field lookup"},
		{"a status the route does not answer", exchange{"POST", svc + "/Verifications", 200, []byte(good)}, "does not list"},
		{"a good error", exchange{"GET", svc, 404,
			[]byte(`{"code":20404,"message":"no","more_info":"https://www.twilio.com/docs/errors/20404","status":404}`)}, ""},
		{"an error with a field of its own", exchange{"GET", svc, 404,
			[]byte(`{"code":20404,"message":"no","more_info":"https://x","status":404,"detail":"x"}`)}, "verify_error.json"},
		{"an error without more_info", exchange{"GET", svc, 404,
			[]byte(`{"code":20404,"message":"no","status":404}`)}, "verify_error.json"},
		{"a fallback channel", exchange{"POST", svc + "/Verifications", 429,
			[]byte(`{"code":20429,"message":"no","more_info":"https://www.twilio.com/docs/errors/20429","status":429,"details":{"fallback":{"channel":"whatsapp","retry":"x"}}}`)}, ""},
		{"empty details", exchange{"POST", svc + "/Verifications", 429,
			[]byte(`{"code":20429,"message":"no","more_info":"https://www.twilio.com/docs/errors/20429","status":429,"details":{}}`)}, "verify_error.json"},
		{"a problem details body", exchange{"GET", svc, 401,
			[]byte(`{"type":"urn:otpguard:problem:unauthorized","status":401,"code":"unauthorized"}`)}, "verify_error.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sp.problems(tc.x)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems = %q, want none", got)
			case tc.want != "" && !strings.Contains(strings.Join(got, "\n"), tc.want):
				t.Errorf("problems = %q, want one naming %q", got, tc.want)
			}
		})
	}
}
