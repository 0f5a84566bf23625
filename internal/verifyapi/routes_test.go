package verifyapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// call sends one request to otpguard: a form body (Content-Type
// contentType, when body is not empty), the Basic credential user:pass
// ("" none), or the bearer key bearer. It answers the status and the
// decoded JSON body.
func call(t *testing.T, method, u, contentType, body, user, pass, bearer string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, u, res.StatusCode, b)
	}
	return res.StatusCode, v
}

const form = "application/x-www-form-urlencoded"

// TestVerifyRequestsStrict: the parameters are read as Verify's SDKs send
// them and nothing else: a parameter twice, one the route does not take, a
// query string, another body format, or a missing one is 60200; a missing
// or wrong credential 20003, with a WWW-Authenticate challenge.
func TestVerifyRequestsStrict(t *testing.T) {
	srv := startTwoServices(t)
	sp := loadSpecs(t)
	create := srv.URL + "/v2/Services/" + serviceA + "/Verifications"
	check := srv.URL + "/v2/Services/" + serviceA + "/VerificationCheck"
	for _, tc := range []struct {
		name             string
		url, ctype, body string
		user, pass       string
		wantStatus       int
		wantCode         float64
	}{
		{"To twice", create, form, "To=%2B14155550150&To=%2B14155550151&Channel=sms", keyA, secretA, 400, 60200},
		{"an unknown parameter", create, form, "To=%2B14155550150&Channel=sms&CustomCode=123456", keyA, secretA, 400, 60200},
		{"a field name in another case", create, form, "to=%2B14155550150&Channel=sms", keyA, secretA, 400, 60200},
		{"a query string", create + "?To=%2B14155550150", form, "To=%2B14155550150&Channel=sms", keyA, secretA, 400, 60200},
		{"a JSON body", create, "application/json", `{"To":"+14155550150","Channel":"sms"}`, keyA, secretA, 400, 60200},
		{"no Channel", create, form, "To=%2B14155550150", keyA, secretA, 400, 60200},
		{"Channel call", create, form, "To=%2B14155550150&Channel=call", keyA, secretA, 400, 60200},
		{"a number that does not parse", create, form, "To=not-a-number&Channel=sms", keyA, secretA, 400, 60200},
		{"no Code", check, form, "To=%2B14155550150", keyA, secretA, 400, 60200},
		{"To and VerificationSid", check, form, "To=%2B14155550150&VerificationSid=VE0123456789abcdef0123456789abcdef&Code=123456", keyA, secretA, 400, 60200},
		{"no credential", create, form, "To=%2B14155550150&Channel=sms", "", "", 401, 20003},
		{"a wrong secret", create, form, "To=%2B14155550150&Channel=sms", keyA, secretB, 401, 20003},
		{"B's credential on A's route", create, form, "To=%2B14155550150&Channel=sms", accountB, secretB, 404, 20404},
		{"a service that does not exist", srv.URL + "/v2/Services/VA0000000000000000000000000000000c/Verifications", form,
			"To=%2B14155550150&Channel=sms", keyA, secretA, 404, 20404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, http.MethodPost, tc.url, tc.ctype, tc.body, tc.user, tc.pass, "")
			if status != tc.wantStatus || body["code"] != tc.wantCode {
				t.Errorf("got %d %v, want %d with code %v", status, body, tc.wantStatus, tc.wantCode)
			}
			u, _ := url.Parse(tc.url)
			b, _ := json.Marshal(body)
			sp.check(t, exchange{method: http.MethodPost, path: u.Path, status: status, body: b})
		})
	}
	if n := srv.Outbox.Count(); n != 0 {
		t.Errorf("%d SMS sent by refused requests, want none", n)
	}
}

// TestDefaultService: the API keys act for the default service. A named
// service's verification is not theirs (404 on /otp/verifications), while
// the verifications of a service marked default are the same ones
// /otp/... reads; an approval without a code ends them.
func TestDefaultService(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "d")
	if err := os.WriteFile(secretFile, []byte(secretA), 0o600); err != nil {
		t.Fatal(err)
	}
	const defaultSID, other = "VA000000000000000000000000000000dd", "VA000000000000000000000000000000ee"
	pol := guard.DefaultPolicies()
	pol.Services = []guard.Service{
		{SID: defaultSID, AccountSID: accountA, Default: true,
			Credentials: []guard.ServiceCredential{{SID: keyA, SecretFile: secretFile}}},
		{SID: other, AccountSID: accountA,
			Credentials: []guard.ServiceCredential{{SID: accountA, SecretFile: secretFile}}},
	}
	srv := otpguardtest.StartWith(t, pol, nil)

	send := func(sid, user, phone string) string {
		t.Helper()
		status, v := call(t, http.MethodPost, srv.URL+"/v2/Services/"+sid+"/Verifications", form,
			"To="+url.QueryEscape(phone)+"&Channel=sms", user, secretA, "")
		if status != http.StatusCreated {
			t.Fatalf("create on %s: %d %v", sid, status, v)
		}
		return v["sid"].(string)
	}
	byKey := func(id string) int {
		status, _ := call(t, http.MethodGet, srv.URL+"/otp/verifications/"+id, "", "", "", "", otpguardtest.APIKey)
		return status
	}
	mine := send(defaultSID, keyA, "+14155550160")
	theirs := send(other, accountA, "+14155550161")
	if got := byKey(mine); got != http.StatusOK {
		t.Errorf("the API key reads the default service's verification: %d, want 200", got)
	}
	if got := byKey(theirs); got != http.StatusNotFound {
		t.Errorf("the API key reads another service's verification: %d, want 404", got)
	}
	// Approved without a code: pending -> approved, once.
	upd := srv.URL + "/v2/Services/" + other + "/Verifications/" + theirs
	if status, v := call(t, http.MethodPost, upd, form, "Status=approved", accountA, secretA, ""); status != 200 || v["status"] != "approved" || v["valid"] != true {
		t.Errorf("Status=approved: %d %v, want 200 approved", status, v)
	}
	if status, v := call(t, http.MethodPost, upd, form, "Status=canceled", accountA, secretA, ""); status != 404 || v["code"] != float64(20404) {
		t.Errorf("canceling an approved verification: %d %v, want 404 20404", status, v)
	}
	if status, v := call(t, http.MethodPost, upd, form, "Status=expired", accountA, secretA, ""); status != 400 || v["code"] != float64(60200) {
		t.Errorf("Status=expired: %d %v, want 400 60200", status, v)
	}
}

// TestWrongCredentialsLockOut: wrong Verify credentials count with the
// wrong API keys of the address; once spent (10 a minute) every
// credential from it, a right one too, is 429 20429 (not 60202, a code's
// spent guesses).
func TestWrongCredentialsLockOut(t *testing.T) {
	srv := startTwoServices(t)
	u := srv.URL + "/v2/Services/" + serviceA
	for i := range 10 {
		if status, v := call(t, http.MethodGet, u, "", "", keyA, "wrong", ""); status != http.StatusUnauthorized {
			t.Fatalf("wrong credential %d: %d %v, want 401", i+1, status, v)
		}
	}
	for _, pass := range []string{"wrong", secretA} {
		if status, v := call(t, http.MethodGet, u, "", "", keyA, pass, ""); status != http.StatusTooManyRequests || v["code"] != float64(20429) {
			t.Errorf("after 10 wrong credentials, %q: %d %v, want 429 20429", pass, status, v)
		}
	}
}
