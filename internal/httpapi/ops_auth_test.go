package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/opsweb"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsAuthMatrix: every ops route, with no key (401, or 303 to the
// sign-in for the page and its forms), an unknown key (401), an API key
// (403) and the ops key (2xx, or 303 back to the page for the forms).
func TestOpsAuthMatrix(t *testing.T) {
	// Eleven routes try an unknown key: more than the default failed
	// sign-ins of one address (TestOpsSignInLimit).
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, signIn: ops.SignInLimit{Failures: 100, Window: time.Minute}})
	routes := []struct {
		method, path, body string
		page               bool
		ok                 int
	}{
		{"GET", "/ops", "", true, 200},
		{"POST", "/ops/actions/unblock", "phone=%2B14155550100&confirmed=1", true, 303},
		{"POST", "/ops/actions/deny", "pattern=%2B88213", true, 303},
		{"POST", "/ops/actions/undeny", "id=1&confirmed=1", true, 303},
		{"POST", "/ops/logout", "", true, 303},
		{"GET", "/ops/blocked", "", false, 200},
		{"DELETE", "/ops/blocked/%2B14155550100", "", false, 200},
		{"GET", "/ops/denylist", "", false, 200},
		{"POST", "/ops/denylist", `{"pattern":"+88214"}`, false, 201},
		{"DELETE", "/ops/denylist/2", "", false, 204}, // 1 was added and removed by the forms
		{"GET", "/ops/events", "", false, 200},
	}
	for _, r := range routes {
		for _, who := range []struct {
			name, key string
			want      int
		}{
			{"no key", "", 401},
			{"unknown key", "not-a-key-0123456789", 401},
			{"API key", apiKey, 403},
			{"ops key", opsKey, r.ok},
		} {
			t.Run(r.method+" "+r.path+" "+who.name, func(t *testing.T) {
				want := who.want
				if r.page && who.key == "" {
					want = http.StatusSeeOther // a browser goes to the sign-in form
				}
				req, _ := http.NewRequest(r.method, oc.instances[0].srv.URL+r.path, strings.NewReader(r.body))
				if r.page {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				if who.key != "" {
					req.Header.Set("Authorization", "Bearer "+who.key)
				}
				res, err := noRedirects.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				body, _ := io.ReadAll(res.Body)
				if res.StatusCode != want {
					t.Fatalf("got %d, want %d: %s", res.StatusCode, want, body)
				}
				switch {
				case want == 401 && res.Header.Get("WWW-Authenticate") == "":
					t.Error("401 without WWW-Authenticate")
				case want == 303 && who.key == "" && res.Header.Get("Location") != "/ops/login":
					t.Errorf("Location %q, want /ops/login", res.Header.Get("Location"))
				}
			})
		}
	}
	// The sign-in form is open.
	if r := oc.doKey(t, 0, "GET", "/ops/login", "", ""); r.Status != 200 || !strings.Contains(string(r.Body), `name="key"`) {
		t.Errorf("GET /ops/login: %d", r.Status)
	}
}

// noRedirects is a client that reports redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// browser is a client with a cookie jar that does not follow redirects.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar := &cookieJar{}
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: noRedirects.CheckRedirect}}
}

// cookieJar keeps cookies whatever their Secure flag, for plain-HTTP tests
// of a server that thinks it is behind TLS.
type cookieJar struct{ cookies []*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	for _, c := range cs {
		kept := j.cookies[:0]
		for _, old := range j.cookies {
			if old.Name != c.Name {
				kept = append(kept, old)
			}
		}
		j.cookies = kept
		if c.MaxAge >= 0 && c.Value != "" {
			j.cookies = append(j.cookies, c)
		}
	}
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie { return j.cookies }

func (b *browser) do(method, path, contentType, body string, header map[string]string) (*http.Response, string) {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.base+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res, string(out)
}

func (b *browser) form(path string, v url.Values) *http.Response {
	b.t.Helper()
	res, _ := b.do("POST", path, "application/x-www-form-urlencoded", v.Encode(), nil)
	return res
}

var csrfInPage = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func TestOpsSession(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite})
	b := newBrowser(t, oc.instances[0].srv.URL)

	// Wrong keys get the form again, and no cookie.
	for key, want := range map[string]int{"wrong-key-0123456789": 401, apiKey: 403, "": 401} {
		res := b.form("/ops/login", url.Values{"key": {key}})
		if res.StatusCode != want || len(res.Cookies()) != 0 {
			t.Errorf("sign in with %q: %d, cookies %v; want %d and none", key, res.StatusCode, res.Cookies(), want)
		}
	}

	res := b.form("/ops/login", url.Values{"key": {opsKey}})
	if res.StatusCode != 303 || res.Header.Get("Location") != "/ops" {
		t.Fatalf("sign in: %d to %q, want 303 to /ops", res.StatusCode, res.Header.Get("Location"))
	}
	ck := res.Cookies()
	if len(ck) != 1 {
		t.Fatalf("cookies: %v", ck)
	}
	c := ck[0]
	if c.Name != "otpguard_ops" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ops" || c.Secure {
		t.Errorf("cookie %+v: want otpguard_ops, HttpOnly, SameSite=Strict, Path=/ops, not Secure over plain HTTP", c)
	}
	if strings.Contains(c.Value, opsKey) || c.MaxAge <= 0 || c.MaxAge > int(opsweb.SessionTTL.Seconds()) {
		t.Errorf("cookie value or lifetime wrong: MaxAge %d", c.MaxAge)
	}

	// The page, on this instance and on the other (one session key).
	res, page := b.do("GET", "/ops", "", "", nil)
	if res.StatusCode != 200 || !strings.Contains(page, "signed in as") {
		t.Fatalf("GET /ops: %d", res.StatusCode)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	m := csrfInPage.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no csrf_token in the page")
	}
	csrf := m[1]
	other := &browser{t: t, base: oc.instances[1].srv.URL, c: b.c}
	if res, _ := other.do("GET", "/ops/blocked", "", "", nil); res.StatusCode != 200 {
		t.Errorf("session on the other instance: %d, want 200", res.StatusCode)
	}

	// State-changing requests with the session need the CSRF token.
	if res, _ := b.do("DELETE", "/ops/blocked/%2B14155550100", "", "", nil); res.StatusCode != 403 {
		t.Errorf("DELETE with the session, no CSRF header: %d, want 403", res.StatusCode)
	}
	if res, _ := b.do("DELETE", "/ops/blocked/%2B14155550100", "", "", map[string]string{"X-CSRF-Token": "forged"}); res.StatusCode != 403 {
		t.Errorf("DELETE with a wrong CSRF header: %d, want 403", res.StatusCode)
	}
	if res, _ := b.do("DELETE", "/ops/blocked/%2B14155550100", "", "", map[string]string{"X-CSRF-Token": csrf}); res.StatusCode != 200 {
		t.Errorf("DELETE with the CSRF header: %d, want 200", res.StatusCode)
	}
	if res := b.form("/ops/actions/deny", url.Values{"pattern": {"+88213"}}); res.StatusCode != 403 {
		t.Errorf("form without csrf_token: %d, want 403", res.StatusCode)
	}
	res = b.form("/ops/actions/deny", url.Values{"pattern": {"+88213"}, "reason": {"test"}, "expires_in": {"1h"}, "csrf_token": {csrf}})
	if res.StatusCode != 303 || res.Header.Get("Location") != "/ops?done=denied" {
		t.Errorf("form with csrf_token: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	// A bad field is named on the page, which keeps what was typed.
	res, page = b.do("POST", "/ops/actions/deny", "application/x-www-form-urlencoded",
		url.Values{"pattern": {"+88x"}, "reason": {"typed reason"}, "csrf_token": {csrf}}.Encode(), nil)
	if res.StatusCode != 400 || !strings.Contains(page, `id="error-pattern"`) || !strings.Contains(page, `value="typed reason"`) {
		t.Errorf("invalid form: %d, want 400 naming the pattern and keeping the reason", res.StatusCode)
	}
	if _, page := b.do("GET", "/ops?err=%3Cscript%3Ealert(1)", "", "", nil); strings.Contains(page, "<script>alert") {
		t.Error("the err parameter reaches the page")
	}

	// Tampered and foreign sessions are refused.
	forged := *c
	forged.Value = strings.Replace(c.Value, ".", "x.", 1)
	plain := &http.Client{CheckRedirect: noRedirects.CheckRedirect}
	req, _ := http.NewRequest("GET", oc.instances[0].srv.URL+"/ops/blocked", nil)
	req.AddCookie(&forged)
	if res, err := plain.Do(req); err != nil || res.StatusCode != 401 {
		t.Errorf("forged session: %v %v, want 401", res.StatusCode, err)
	}
	// A server whose ops keys no longer include the session's key.
	rotated := httpapi.New(httpapi.Options{OpsKeys: []string{"another-ops-key-0123456789"}, SessionKey: oc.instances[0].app.OpsSessionKey(), Spec: api.OpenAPI, Ops: oc.nodes[0].desk})
	req = httptestRequest("GET", "/ops/blocked", c)
	rec := serveOnce(rotated, req)
	if rec.StatusCode != 401 {
		t.Errorf("session of a removed key: %d, want 401", rec.StatusCode)
	}

	// Sign-out clears the cookie and needs the CSRF token too.
	if res := b.form("/ops/logout", url.Values{}); res.StatusCode != 403 {
		t.Errorf("logout without csrf_token: %d, want 403", res.StatusCode)
	}
	res = b.form("/ops/logout", url.Values{"csrf_token": {csrf}})
	if res.StatusCode != 303 || len(res.Cookies()) != 1 || res.Cookies()[0].MaxAge >= 0 {
		t.Errorf("logout: %d, cookies %v; want 303 and the cookie cleared", res.StatusCode, res.Cookies())
	}
	if res, _ := b.do("GET", "/ops", "", "", nil); res.StatusCode != 303 {
		t.Errorf("page after logout: %d, want 303 to the sign-in", res.StatusCode)
	}
	// A copy of the cookie kept from before the sign-out is dead too, on
	// every instance.
	for i := range oc.instances {
		req, _ := http.NewRequest("GET", oc.instances[i].srv.URL+"/ops/blocked", nil)
		req.AddCookie(c)
		if res, err := plain.Do(req); err != nil || res.StatusCode != 401 {
			t.Errorf("instance %d: the signed-out session's cookie: %v %v, want 401", i, res.StatusCode, err)
		}
	}
}

// TestOpsSessionCookieSecureBehindTLS: behind a TLS-terminating proxy the
// cookie is Secure (echo trusts X-Forwarded-Proto from private addresses).
func TestOpsSessionCookieSecureBehindTLS(t *testing.T) {
	srv := httpapi.New(httpapi.Options{OpsKeys: []string{opsKey}, Spec: api.OpenAPI})
	req := httptestRequest("POST", "/ops/login", nil)
	req.Body = io.NopCloser(strings.NewReader(url.Values{"key": {opsKey}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.RemoteAddr = "10.0.0.2:41000" // the proxy, on a private network echo trusts
	res := serveOnce(srv, req)
	if res.StatusCode != 303 || len(res.Cookies()) != 1 || !res.Cookies()[0].Secure {
		t.Fatalf("sign in over https: %d, cookies %v; want a Secure cookie", res.StatusCode, res.Cookies())
	}
	// Without the ops desk the API answers 503, not a panic.
	req = httptestRequest("GET", "/ops/blocked", res.Cookies()[0])
	if res := serveOnce(srv, req); res.StatusCode != 503 {
		t.Errorf("ops API without the desk: %d, want 503", res.StatusCode)
	}
}

func httptestRequest(method, path string, c *http.Cookie) *http.Request {
	req := httptest.NewRequest(method, path, nil)
	if c != nil {
		req.AddCookie(c)
	}
	return req
}

func serveOnce(h http.Handler, req *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// TestOpsSignInLimit guesses ops keys at once on two instances, by the
// sign-in form and by bearer: exactly the limit of guesses from one address
// is checked, every other one is 429 with Retry-After and is not checked
// (the right key too); good keys spend nothing; another address is not
// held back.
func TestOpsSignInLimit(t *testing.T) {
	const failures = 5
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite,
		signIn: ops.SignInLimit{Failures: failures, Window: time.Minute}, trustProxies: loopback})

	// attempt signs in at instance i from address ip, by form or bearer.
	attempt := func(i int, ip, key string, form bool) *http.Response {
		t.Helper()
		var req *http.Request
		if form {
			req, _ = http.NewRequest("POST", oc.instances[i].srv.URL+"/ops/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			req, _ = http.NewRequest("GET", oc.instances[i].srv.URL+"/ops/denylist", nil)
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("X-Forwarded-For", ip) // believed from loopback, a trusted proxy here
		res, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	// Good keys first: they give their attempt back.
	for i := range 3 * failures {
		if res := attempt(i%2, "203.0.113.9", opsKey, i%2 == 0); res.StatusCode != http.StatusOK && res.StatusCode != http.StatusSeeOther {
			t.Fatalf("good key %d: %d", i, res.StatusCode)
		}
	}

	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			res := attempt(g%2, "203.0.113.9", fmt.Sprintf("guess-%02d-0123456789abcdef", g), g%4 < 2)
			mu.Lock()
			defer mu.Unlock()
			statuses[res.StatusCode]++
			if res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}
	wg.Wait()
	t.Logf("40 wrong keys over 2 instances, limit %d: %v", failures, statuses)
	if statuses[http.StatusUnauthorized] != failures || statuses[http.StatusTooManyRequests] != 40-failures {
		t.Errorf("statuses %v: want exactly %d checked (401) and %d refused (429)", statuses, failures, 40-failures)
	}
	// Held back: the right key is not even checked.
	for _, form := range []bool{true, false} {
		if res := attempt(1, "203.0.113.9", opsKey, form); res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("right key after the limit (form %v): %d, want 429", form, res.StatusCode)
		}
	}
	// Another address, and the same /64 of IPv6 counted as one.
	if res := attempt(0, "198.51.100.20", opsKey, true); res.StatusCode != http.StatusSeeOther {
		t.Errorf("another address: %d, want 303 to the ops page", res.StatusCode)
	}
	for i := range failures {
		attempt(0, fmt.Sprintf("2001:db8:1:2::%x", i+1), "wrong-key-0123456789abcdef", false)
	}
	if res := attempt(1, "2001:db8:1:2::ffff", opsKey, false); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("same IPv6 /64 after %d failures: %d, want 429", failures, res.StatusCode)
	}
}
