package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
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

// serviceStatus is GET /v2/Services/{sid}'s status with the credential
// SK<sid's hex>:secret.
func serviceStatus(t *testing.T, in *instance, sid, secret string) int {
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
