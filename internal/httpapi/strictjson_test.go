package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestStrictJSONAndPlainReasons: a body is read one way only (field names
// match exactly, each field once), and a refusal says what is wrong with
// which field. Each case checks the problem code and that the detail names
// the real problem (and not the misleading text it used to give).
func TestStrictJSONAndPlainReasons(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	inYears := func(y int) string { return time.Now().AddDate(y, 0, 0).UTC().Format(time.RFC3339) }
	for _, tc := range []struct {
		name, path, body string
		key              string // "" is the API key
		status           int
		code             string
		want             []string // in the detail
		notWant          string   // not in the detail
	}{
		// Strict names: a gateway that reads "phone" must see what otpguard uses.
		{name: "case variant of a field", path: "/otp/send", body: `{"PHONE":"+919800000000"}`,
			status: 400, code: "invalid_request", want: []string{`"PHONE"`, "case"}},
		{name: "case variant beside the field", path: "/otp/send", body: `{"phone":"+919800000001","Phone":"+919800000000"}`,
			status: 400, code: "invalid_request", want: []string{`"Phone"`}},
		{name: "duplicate field", path: "/otp/send", body: `{"phone":"+919800000001","phone":"+919800000000"}`,
			status: 400, code: "invalid_request", want: []string{"duplicate", `"phone"`}},
		{name: "duplicate field in a check", path: "/limits/check", body: `{"checks":[{"policy":"default","key":"a","key":"b"}]}`,
			status: 400, code: "invalid_request", want: []string{"duplicate", "checks[0].key"}},
		{name: "duplicate ops field", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","pattern":"+1"}`,
			status: 400, code: "invalid_request", want: []string{"duplicate", `"pattern"`}},
		{name: "case variant of an ops field", path: "/ops/denylist", key: opsKey, body: `{"Pattern":"+88213"}`,
			status: 400, code: "invalid_request", want: []string{`"Pattern"`}},
		{name: "unknown field", path: "/otp/send", body: `{"phone":"+919800000000","chanel":"sms"}`,
			status: 400, code: "invalid_request", want: []string{"unknown field", `"chanel"`}},

		// Misleading texts, now plain.
		{name: "Cyrillic key", path: "/limits/check", body: `{"policy":"default","key":"ключ"}`,
			status: 422, code: "invalid_key", want: []string{"'к'"}, notWant: "Ð"},
		{name: "unparseable expires_at", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","expires_at":"tomorrow"}`,
			status: 400, code: "invalid_request", want: []string{"expires_at", "RFC 3339"}, notWant: "malformed"},
		// A single check names its fields as it was sent, not as a batch.
		{name: "single check without policy", path: "/limits/check", body: `{"key":"k"}`,
			status: 400, code: "invalid_request", want: []string{"policy is required"}, notWant: "checks["},
		{name: "single check, unknown policy", path: "/limits/check", body: `{"policy":"nope","key":"k"}`,
			status: 404, code: "unknown_policy", want: []string{`"nope"`}, notWant: "checks["},
		{name: "single check, bad key", path: "/limits/check", body: `{"policy":"default","key":""}`,
			status: 422, code: "invalid_key", want: []string{"key"}, notWant: "checks["},
		{name: "single check, bad cost", path: "/limits/check", body: `{"policy":"default","key":"k","cost":100000}`,
			status: 422, code: "invalid_cost", want: []string{"cost must be"}, notWant: "checks["},
		{name: "nested array", path: "/limits/check", body: `{"checks":[["default","k"]]}`,
			status: 400, code: "invalid_request", want: []string{"checks[0]", "an object", "got an array"}},
		{name: "fraction for a whole number", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","expires_in":1.5}`,
			status: 400, code: "invalid_request", want: []string{"expires_in", "whole number", "1.5"}, notWant: "got number"},
		{name: "string for a number", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","expires_in":"600"}`,
			status: 400, code: "invalid_request", want: []string{"expires_in", "whole number", "got a string"}},
		{name: "number for a string", path: "/otp/send", body: `{"phone":919800000000}`,
			status: 400, code: "invalid_request", want: []string{"phone", "a string", "got a number"}},
		{name: "array body", path: "/otp/send", body: `[{"phone":"+919800000000"}]`,
			status: 400, code: "invalid_request", want: []string{"JSON object", "got an array"}},
		{name: "cut short", path: "/otp/send", body: `{"phone":`,
			status: 400, code: "invalid_request", want: []string{"malformed JSON"}},
		{name: "two objects", path: "/otp/send", body: `{"phone":"+919800000000"} {}`,
			status: 400, code: "invalid_request", want: []string{"after the JSON object"}},

		// The deny-list's expires_at is bounded like expires_in.
		{name: "expires_at in year 9999", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","expires_at":"9999-12-31T23:59:59Z"}`,
			status: 400, code: "invalid_request", want: []string{"expires_at", "10 years"}},
		{name: "expires_at eleven years ahead", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88213","expires_at":"` + inYears(11) + `"}`,
			status: 400, code: "invalid_request", want: []string{"expires_at", "10 years"}},
		{name: "expires_at nine years ahead", path: "/ops/denylist", key: opsKey, body: `{"pattern":"+88214","expires_at":"` + inYears(9) + `"}`,
			status: 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == "" {
				key = apiKey
			}
			r := oc.doKey(t, 0, "POST", tc.path, tc.body, key)
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if tc.code == "" {
				return
			}
			p := r.json(t)
			detail, _ := p["detail"].(string)
			if p["code"] != tc.code {
				t.Errorf("code %v, want %s (detail %q)", p["code"], tc.code, detail)
			}
			for _, w := range tc.want {
				if !strings.Contains(detail, w) {
					t.Errorf("detail %q does not say %s", detail, w)
				}
			}
			if tc.notWant != "" && strings.Contains(detail, tc.notWant) {
				t.Errorf("detail %q still says %q", detail, tc.notWant)
			}
		})
	}
	if n := oc.out.Count(); n != 0 {
		t.Errorf("refused bodies sent %d messages, want 0", n)
	}
}
