package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// servicesYAML is a policy file naming services sids, each with the
// credential SK... whose secret is in dir/<sid>.
func servicesYAML(dir string, sids ...string) string {
	s := "otp:\n  per_phone: {limit: 3, window: 10m}\nservices:\n"
	for _, sid := range sids {
		s += fmt.Sprintf("  - sid: %s\n    account_sid: AC%s\n    credentials:\n      - sid: SK%s\n        secret_file: %s\n",
			sid, sid[2:], sid[2:], filepath.Join(dir, sid))
	}
	return s
}

// getService is GET /v2/Services/{sid} with the credential
// SK<sid's hex>:secret; the caller closes the body.
func getService(t *testing.T, in *instance, sid, secret string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, in.srv.URL+"/v2/Services/"+sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("SK"+sid[2:], secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// serviceStatus is GET /v2/Services/{sid}'s status (getService).
func serviceStatus(t *testing.T, in *instance, sid, secret string) int {
	t.Helper()
	res := getService(t, in, sid, secret)
	res.Body.Close()
	return res.StatusCode
}

// TestReloadServices: the services and their secrets are read again at
// every reload. A secret file that cannot be read fails the reload and
// keeps the services in force; a good reload adds a service, and a
// rotated secret replaces the old one.
func TestReloadServices(t *testing.T) {
	const a, b = "VA0000000000000000000000000000aaaa", "VA0000000000000000000000000000bbbb"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, a), "secretA1\n")
	in, path := reloadInstance(t, servicesYAML(dir, a))
	if got := serviceStatus(t, in, a, "secretA1"); got != http.StatusOK {
		t.Fatalf("service a at start: %d, want 200", got)
	}

	writeFile(t, path, servicesYAML(dir, a, b)) // b's secret file is missing
	if err := in.app.Reload(context.Background()); err == nil {
		t.Fatal("Reload with a missing secret file: nil error, want the reload refused")
	}
	if got := serviceStatus(t, in, a, "secretA1"); got != http.StatusOK {
		t.Errorf("service a after the refused reload: %d, want 200 (kept)", got)
	}
	if got := serviceStatus(t, in, b, "secretB1"); got != http.StatusUnauthorized {
		t.Errorf("service b after the refused reload: %d, want 401 (not in force)", got)
	}

	writeFile(t, filepath.Join(dir, b), "secretB1")
	writeFile(t, filepath.Join(dir, a), "secretA2\n")
	if err := in.app.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	for _, tc := range []struct {
		sid, secret string
		want        int
	}{{b, "secretB1", 200}, {a, "secretA2", 200}, {a, "secretA1", 401}} {
		if got := serviceStatus(t, in, tc.sid, tc.secret); got != tc.want {
			t.Errorf("service %s with %s after the reload: %d, want %d", tc.sid, tc.secret, got, tc.want)
		}
	}
}

// serviceCodeLength is GET /v2/Services/{sid}'s code_length (getService).
func serviceCodeLength(t *testing.T, in *instance, sid, secret string) int {
	t.Helper()
	res := getService(t, in, sid, secret)
	defer res.Body.Close()
	var body struct {
		CodeLength int `json:"code_length"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v2/Services/%s: %d, %v", sid, res.StatusCode, err)
	}
	return body.CodeLength
}

// TestReloadServicePolicy: a service's otp: block is read again at every
// reload, as the rest of the file; a block that does not validate (a
// code_length out of range, a channel this deployment has no sender for)
// fails the reload and keeps the policy in force.
func TestReloadServicePolicy(t *testing.T) {
	const a = "VA0000000000000000000000000000aaaa"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, a), "secretA1\n")
	in, path := reloadInstance(t, servicesYAML(dir, a))
	if got := serviceCodeLength(t, in, a, "secretA1"); got != 6 {
		t.Fatalf("code_length at start: %d, want the deployment's 6", got)
	}
	withOTP := func(block string) string { return servicesYAML(dir, a) + "    otp: " + block + "\n" }

	writeFile(t, path, withOTP("{code_length: 8}"))
	if err := in.app.Reload(context.Background()); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := serviceCodeLength(t, in, a, "secretA1"); got != 8 {
		t.Fatalf("code_length after the reload: %d, want the service's 8", got)
	}
	for _, tc := range []struct{ block, want string }{
		{"{code_length: 12}", "services[0].otp.code_length"},
		{"{code_length: 7, channels: [sms, whatsapp]}", "services[0].otp.channels[1]: the whatsapp channel is off on this deployment"},
	} {
		writeFile(t, path, withOTP(tc.block))
		if err := in.app.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Reload with otp: %s: %v, want an error naming %q", tc.block, err, tc.want)
		}
		if got := serviceCodeLength(t, in, a, "secretA1"); got != 8 {
			t.Errorf("code_length after the refused reload: %d, want 8 (kept)", got)
		}
	}
}
