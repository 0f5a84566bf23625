package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

func TestBadOTPInput(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	huge := `{"phone":"` + strings.Repeat("9", 20<<10) + `"}`
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"malformed JSON", "/otp/send", `{"phone":`, 400, "invalid_request"},
		{"phone as number", "/otp/send", `{"phone":919800000000}`, 400, "invalid_request"},
		{"unknown field", "/otp/send", `{"phone":"+919800000000","chanel":"sms"}`, 400, "invalid_request"},
		{"null body", "/otp/send", `null`, 422, "invalid_phone"},
		{"huge body", "/otp/send", huge, 413, "body_too_large"},
		{"empty phone", "/otp/send", `{"phone":""}`, 422, "invalid_phone"},
		{"letters", "/otp/send", `{"phone":"call me maybe"}`, 422, "invalid_phone"},
		{"too short", "/otp/send", `{"phone":"+91 98"}`, 422, "invalid_phone"},
		{"absurdly long", "/otp/send", `{"phone":"+` + strings.Repeat("1", 70) + `"}`, 422, "invalid_phone"},
		{"no country code", "/otp/send", `{"phone":"98000 00000"}`, 422, "invalid_phone"},
		{"bad client_ip", "/otp/send", `{"phone":"+919800000000","client_ip":"300.1.1.1"}`, 400, "invalid_request"},
		{"client_ip with a zone", "/otp/send", `{"phone":"+919800000000","client_ip":"fe80::1%\u0000"}`, 400, "invalid_request"},
		{"a locale Verify does not list", "/otp/send", `{"phone":"+919800000000","locale":"es-MX"}`, 400, "invalid_request"},
		{"a long locale", "/otp/send", `{"phone":"+919800000000","locale":"` + strings.Repeat("e", 100) + `"}`, 400, "invalid_request"},
		{"locale as a list", "/otp/send", `{"phone":"+919800000000","locale":["es"]}`, 400, "invalid_request"},
		{"verify: letters in code", "/otp/verify", `{"phone":"+919800000000","code":"12a456"}`, 422, "invalid_code"},
		{"verify: short code", "/otp/verify", `{"phone":"+919800000000","code":"123"}`, 422, "invalid_code"},
		{"verify: code as number", "/otp/verify", `{"phone":"+919800000000","code":123456}`, 400, "invalid_request"},
		{"verify: unicode digits", "/otp/verify", `{"phone":"+919800000000","code":"١٢٣٤٥٦"}`, 422, "invalid_code"},
		{"verify: no code sent", "/otp/verify", `{"phone":"+919800000000","code":"123456"}`, 400, "no_active_code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, 0, "POST", tc.path, tc.body)
			if r.Status != tc.status || r.json(t)["code"] != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tc.status, tc.code)
			}
			if r.Header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id header")
			}
		})
	}
	if n := c.out.Count(); n != 0 {
		t.Errorf("bad input sent %d messages, want 0", n)
	}
}

func TestAuthAndRouting(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	body := `{"policy":"default","key":"k"}`
	for _, tc := range []struct {
		name, method, path, key string
		status                  int
		code                    string
	}{
		{"no key", "POST", "/limits/check", "", 401, "unauthorized"},
		{"wrong key", "POST", "/limits/check", "not-a-key-at-all-xxxx", 401, "unauthorized"},
		{"ops key on the API", "POST", "/otp/send", opsKey, 403, "forbidden"},
		{"unknown route", "GET", "/nope", apiKey, 404, "not_found"},
		{"wrong method", "GET", "/otp/send", apiKey, 405, "method_not_allowed"},
		{"api key", "POST", "/limits/check", apiKey, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.doKey(t, 0, tc.method, tc.path, body, tc.key)
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if tc.code != "" && r.json(t)["code"] != tc.code {
				t.Fatalf("code %v, want %s", r.json(t)["code"], tc.code)
			}
		})
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		if r := c.doKey(t, 0, "GET", path, "", ""); r.Status != 200 {
			t.Errorf("GET %s: %d, want 200 without a key", path, r.Status)
		}
	}
}

func TestRequestIDs(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	for _, tc := range []struct {
		name, sent string
		kept       bool
	}{
		{"plain id is kept", "abc-123_x.y", true},
		{"none", "", false},
		{"too long", strings.Repeat("a", 65), false},
		{"log injection", "x\" injected=\"1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", c.instances[0].srv.URL+"/healthz", nil)
			req.Header.Set("X-Request-Id", tc.sent)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got := res.Header.Get("X-Request-Id")
			if tc.kept && got != tc.sent {
				t.Errorf("X-Request-Id = %q, want the caller's %q", got, tc.sent)
			}
			if !tc.kept && (got == tc.sent || len(got) != 32) {
				t.Errorf("X-Request-Id = %q, want a fresh 32-character id", got)
			}
		})
	}
}
