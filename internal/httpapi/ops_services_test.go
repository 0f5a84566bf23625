package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// deskService is one Verify service of the desk's tests, with the
// secret of its one credential.
type deskService struct {
	sid, name, account, key, secret string
}

var (
	deskShop = deskService{sid: "VA0123456789abcdef0123456789abcdef", name: "Shop", account: "AC0123456789abcdef0123456789abcdef",
		key: "SK0123456789abcdef0123456789abcdef", secret: "shopsecret0123456789abcdef0123456789"}
	deskBank = deskService{sid: "VAfedcba9876543210fedcba9876543210", name: "Bank", account: "ACfedcba9876543210fedcba9876543210",
		key: "SKfedcba9876543210fedcba9876543210", secret: "banksecret0123456789abcdef0123456789"}
)

// servicesCluster starts an ops cluster whose policy names services,
// each secret in a file of its own.
func servicesCluster(t *testing.T, engine string, services ...deskService) *opsCluster {
	t.Helper()
	dir := t.TempDir()
	pol := defaults()
	for _, s := range services {
		path := filepath.Join(dir, s.sid)
		writeFile(t, path, s.secret+"\n")
		pol.Services = append(pol.Services, guard.Service{SID: s.sid, FriendlyName: s.name, AccountSID: s.account,
			Credentials: []guard.ServiceCredential{{SID: s.key, SecretFile: path}}})
	}
	return newOpsCluster(t, opsConfig{engine: engine, policies: &pol})
}

// verifyCall posts form to a Verify route of s with its credential and
// returns the status.
func verifyCall(t *testing.T, oc *opsCluster, s deskService, route string, form url.Values) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, oc.instances[0].srv.URL+"/v2/Services/"+s.sid+"/"+route, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(s.key, s.secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// serviceSend sends a code to phone through s's Verify route and, when
// verify is set, checks the right code.
func serviceSend(t *testing.T, oc *opsCluster, s deskService, phone string, verify bool) {
	t.Helper()
	if got := verifyCall(t, oc, s, "Verifications", url.Values{"To": {phone}, "Channel": {"sms"}}); got != http.StatusCreated {
		t.Fatalf("%s: send to %s: %d, want 201", s.name, phone, got)
	}
	if !verify {
		return
	}
	code := oc.out.LastCode(t, phone)
	if got := verifyCall(t, oc, s, "VerificationCheck", url.Values{"To": {phone}, "Code": {code}}); got != http.StatusOK {
		t.Fatalf("%s: check %s: %d, want 200", s.name, phone, got)
	}
}

// waitServiceCounts waits until the audit trail holds want (by SID, ""
// the default service): the events are written off the request path.
func waitServiceCounts(t *testing.T, oc *opsCluster, want map[string]ops.ServiceCount) {
	t.Helper()
	var got map[string]ops.ServiceCount
	opsWait(t, "the services' counts in the audit trail", func() bool {
		db := oc.instances[0].app.SQL()
		if db == nil {
			return false
		}
		counts, err := db.CountByService(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			return false
		}
		got = map[string]ops.ServiceCount{}
		for _, c := range counts {
			got[c.Service] = c
		}
		return cmp.Equal(want, got)
	})
}

type servicesJSON struct {
	Services []struct {
		SID            string   `json:"sid"`
		FriendlyName   string   `json:"friendly_name"`
		AccountSID     string   `json:"account_sid"`
		Default        bool     `json:"default"`
		CredentialSIDs []string `json:"credential_sids"`
		Note           string   `json:"note"`
	} `json:"services"`
}

// TestOpsServicesRoute: GET /ops/services lists the services in force,
// the default service first, to an ops key and to no other credential,
// and never shows a secret, its file or its digest.
func TestOpsServicesRoute(t *testing.T) {
	oc := servicesCluster(t, sqlstore.EngineSQLite, deskShop, deskBank)

	r := oc.ops(t, 0, "GET", "/ops/services", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/services with the ops key: %d %s", r.Status, r.Body)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control: %q, want no-store", got)
	}
	var got servicesJSON
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	type row struct {
		SID, Name, Account string
		Default            bool
		Keys               []string
	}
	var rows []row
	for _, s := range got.Services {
		rows = append(rows, row{s.SID, s.FriendlyName, s.AccountSID, s.Default, s.CredentialSIDs})
	}
	want := []row{
		{Name: "Default service", Default: true, Keys: []string{}},
		{SID: deskShop.sid, Name: "Shop", Account: deskShop.account, Keys: []string{deskShop.key}},
		{SID: deskBank.sid, Name: "Bank", Account: deskBank.account, Keys: []string{deskBank.key}},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	if len(got.Services) > 0 && !strings.Contains(got.Services[0].Note, "API keys") {
		t.Errorf("default row's note %q: want it to say the API keys act for it", got.Services[0].Note)
	}

	page := oc.ops(t, 0, "GET", "/ops", "")
	for _, s := range []deskService{deskShop, deskBank} {
		for _, body := range []response{r, page} {
			for what, secret := range secretForms(s) {
				if strings.Contains(string(body.Body), secret) {
					t.Errorf("%s's %s appears in an ops answer", s.name, what)
				}
			}
		}
	}
	if strings.Contains(string(r.Body), "secret_file") || strings.Contains(string(r.Body), filepath.Dir(t.TempDir())) {
		t.Errorf("GET /ops/services names a secret file: %s", r.Body)
	}

	for _, tc := range []struct {
		name string
		set  func(*http.Request)
		want int
	}{
		{"an API key", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+apiKey) }, http.StatusForbidden},
		{"no credential", func(*http.Request) {}, http.StatusUnauthorized},
		{"a service's credential", func(r *http.Request) { r.SetBasicAuth(deskShop.key, deskShop.secret) }, http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodGet, oc.instances[0].srv.URL+"/ops/services", nil)
		if err != nil {
			t.Fatal(err)
		}
		tc.set(req)
		res, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("GET /ops/services with %s: %d, want %d", tc.name, res.StatusCode, tc.want)
		}
	}
}

// secretForms are the ways a service's secret could leak: itself, and
// the digests a store of it could hold.
func secretForms(s deskService) map[string]string {
	digest := func(v string) string { sum := sha256.Sum256([]byte(v)); return hex.EncodeToString(sum[:]) }
	return map[string]string{"secret": s.secret, "secret's digest": digest(s.secret),
		"credential's digest": digest(s.key + ":" + s.secret)}
}

// TestOpsServicesRouteWithoutServices: a deployment that names no
// service lists the default service alone, and says so.
func TestOpsServicesRouteWithoutServices(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	r := oc.ops(t, 0, "GET", "/ops/services", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/services: %d %s", r.Status, r.Body)
	}
	var got servicesJSON
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Services) != 1 || !got.Services[0].Default || got.Services[0].SID != "" ||
		!strings.Contains(got.Services[0].Note, "no service of the policy file is marked default") {
		t.Errorf("services: %s, want the default service alone, saying so", r.Body)
	}
}
