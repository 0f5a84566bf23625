package verifyapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/otpguardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// nodeDir holds the pinned twilio-node: package.json names its version,
// package-lock.json every dependency, and verify.js drives the routes.
// node_modules is not committed: twilioNode fills it with npm ci.
const nodeDir = "testdata/node"

// How long npm ci and the Node script may take. npm ci fetches some 50
// small packages; the script makes eight calls, each bounded by itself.
const (
	npmCITimeout  = 5 * time.Minute
	scriptTimeout = 2 * time.Minute
)

// TestTwilioNodeVerify drives the Verify routes with twilio-node, Twilio's
// own Node SDK at the version testdata/node pins, only its HTTP client's
// base address changed (testdata/node/verify.js): a send, a wrong code,
// the right code, a cancel, a rate-limited send (the SDK's RestException)
// and the service. The script reads each code from the fake SMS provider
// through a URL this test serves. A recording proxy between the SDK and
// otpguard keeps every answer, held then to Twilio's OpenAPI document (a
// success) or the error body's schema.
func TestTwilioNodeVerify(t *testing.T) {
	node, version := twilioNode(t)
	srv := startTwoServices(t)
	rec := &recorder{next: http.DefaultTransport}
	proxy, agents := recordingProxy(t, srv.URL, rec)
	codes := httptest.NewServer(codeLookup(srv.Outbox))
	t.Cleanup(codes.Close)

	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "verify.js")
	cmd.Dir = nodeDir
	// Only what the script reads: no proxy settings, NODE_OPTIONS or
	// TWILIO_ variables of the machine's reach the SDK.
	cmd.Env = []string{
		"VERIFY_URL=" + proxy.URL,
		"CODES_URL=" + codes.URL + "/code",
		"SERVICE_SID=" + serviceA,
		"ACCOUNT_SID=" + accountA,
		"KEY_SID=" + keyA,
		"KEY_SECRET=" + secretA,
		"PHONE=+14155550142",
		"OTHER_PHONE=+14155550143",
	}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("node verify.js:\n%s", out)
	if err != nil {
		t.Fatalf("node verify.js: %v (its output is above)", err)
	}

	// Every call the script makes reached otpguard, from the pinned SDK,
	// and got the answer the script checked.
	seen := rec.exchanges()
	var got []string
	for _, x := range seen {
		got = append(got, x.method+" "+routeOf(x.path)+" "+strconv.Itoa(x.status))
	}
	want := []string{
		"POST /v2/Services/{ServiceSid}/Verifications 201",
		"POST /v2/Services/{ServiceSid}/VerificationCheck 200",
		"POST /v2/Services/{ServiceSid}/VerificationCheck 200",
		"GET /v2/Services/{ServiceSid}/Verifications/{Sid} 200",
		"POST /v2/Services/{ServiceSid}/Verifications 201",
		"POST /v2/Services/{ServiceSid}/Verifications/{Sid} 200",
		"POST /v2/Services/{ServiceSid}/Verifications 429",
		"GET /v2/Services/{Sid} 200",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the calls twilio-node made (-want +got):\n%s", diff)
	}
	for _, ua := range agents() {
		if !strings.HasPrefix(ua, "twilio-node/"+version+" ") {
			t.Errorf("User-Agent %q, want twilio-node/%s's", ua, version)
		}
	}

	sp := loadSpecs(t)
	for _, x := range seen {
		sp.check(t, x)
	}
}

// twilioNode returns the node program and the twilio-node version that
// testdata/node pins, installed: npm ci runs first when node_modules does
// not hold that version. Without Node.js 20 or later, npm, or the npm
// registry, the test is skipped, or fails under
// OTPGUARD_REQUIRE_SERVICES=1 (as in CI).
func twilioNode(t *testing.T) (node, version string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		redistest.Unavailable(t, "node is not installed (twilio-node needs Node.js 20 or later, with npm)")
	}
	if major := nodeMajor(t, node); major < 20 {
		redistest.Unavailable(t, "%s is Node.js %d: twilio-node needs 20 or later", node, major)
	}
	version = pinnedTwilio(t)
	if installedTwilio() != version {
		npmCI(t)
		if got := installedTwilio(); got != version {
			t.Fatalf("after npm ci, %s/node_modules holds twilio %q, want %q: package.json and package-lock.json disagree; run npm install in %s", nodeDir, got, version, nodeDir)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "verify.js")); err != nil {
		t.Fatal(err)
	}
	return node, version
}

// nodeMajor is the major version of the node program.
func nodeMajor(t *testing.T, node string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		redistest.Unavailable(t, "%s --version: %v", node, err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		t.Fatalf("%s --version printed %q, want vMAJOR.MINOR.PATCH", node, out)
	}
	return major
}

// pinnedTwilio is the twilio version testdata/node/package.json names.
func pinnedTwilio(t *testing.T) string {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(nodeDir, "package.json"))
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil || pkg.Dependencies["twilio"] == "" {
		t.Fatalf("%s/package.json must name twilio's exact version: %v", nodeDir, err)
	}
	return pkg.Dependencies["twilio"]
}

// installedTwilio is the version of twilio in testdata/node/node_modules,
// or "" when it is not there.
func installedTwilio() string {
	var pkg struct {
		Version string `json:"version"`
	}
	b, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", "twilio", "package.json"))
	if err != nil || json.Unmarshal(b, &pkg) != nil {
		return ""
	}
	return pkg.Version
}

// npmCI installs exactly what testdata/node/package-lock.json lists, no
// package's install script run.
func npmCI(t *testing.T) {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		redistest.Unavailable(t, "npm is not installed: it installs twilio-node in %s", nodeDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), npmCITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = nodeDir
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		redistest.Unavailable(t, "npm ci in %s (it needs the npm registry): %v\n%s", nodeDir, err, out)
	}
}

// recordingProxy serves a reverse proxy to target on the loopback
// address, each answer kept by rec (its Transport); agents lists the
// User-Agent of each request it received.
func recordingProxy(t *testing.T, target string, rec *recorder) (srv *httptest.Server, agents func() []string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			mu.Lock()
			seen = append(seen, pr.In.UserAgent())
			mu.Unlock()
			pr.SetURL(u)
		},
		Transport: rec,
	}
	srv = httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// codeLookup answers GET /code?to=<phone> with the code of the last SMS
// the outbox (the fake SMS provider) took for phone: how the Node script
// reads what the user would.
func codeLookup(o *otpguardtest.Outbox) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /code", func(w http.ResponseWriter, r *http.Request) {
		code, ok := sentCode(o, r.URL.Query().Get("to"))
		if !ok {
			http.Error(w, "no SMS to that number", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(code))
	})
	return mux
}

// routeOf is path as Twilio's document names its route.
func routeOf(path string) string {
	for _, p := range specPaths {
		if p.re.MatchString(path) {
			return p.path
		}
	}
	return path
}
