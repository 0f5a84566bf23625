package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// privateNumber is the number the privacy tests search for; its national
// digits are what must never reach a log line.
const privateNumber, privateDigits = "+447400135791", "7400135791"

// privateSpellings are ways people type privateNumber, and one too long to
// be a number (refused 422 invalid_phone, which logs its code).
var privateSpellings = []string{"+447400135791", "+44 7400 135791", "+44 (0)7400-135-791", "+44.7400.135.791", "+44740013579199"}

// numberRuns matches, in a string, any run of five of the number's
// national digits in a row, with or without the separators people and URLs
// put between them (a space, a dot, a dash, a bracket; %20, + in a query).
var numberRuns = func() *regexp.Regexp {
	sep := `(?:[\s().\-+]|%20|%28|%29|%2[dD])*`
	var alts []string
	for i := 0; i+5 <= len(privateDigits); i++ {
		alts = append(alts, strings.Join(strings.Split(privateDigits[i:i+5], ""), sep))
	}
	return regexp.MustCompile(strings.Join(alts, "|"))
}()

// TestOpsSearchNeverLogsTheNumber: searching a number on the page (GET
// /ops?q=) and by the API (GET /ops/numbers/{phone}), in several
// spellings, signed in or not, writes no run of its digits to any log
// line at debug: the request lines name the route, never the path or
// the query, and the look-up's audit masks the number.
func TestOpsSearchNeverLogsTheNumber(t *testing.T) {
	if !numberRuns.MatchString("GET /ops?q=%2B44+7400+135791") || !numberRuns.MatchString(`{"phone":"+44 (0)7400-135-791"}`) ||
		numberRuns.MatchString(`"phone":"+44********91"`) {
		t.Fatal("numberRuns does not tell the number from its mask")
	}
	logs := &syncBuffer{}
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, logs: logs, logLevel: "debug"})
	if status, _ := oc.send(t, 0, privateNumber); status != http.StatusOK { // a live code and a cooldown to answer about
		t.Fatalf("send: %d", status)
	}
	for _, s := range privateSpellings {
		for _, path := range []string{"/ops?q=" + url.QueryEscape(s), "/ops/numbers/" + url.PathEscape(s)} {
			if r := oc.ops(t, 0, "GET", path, ""); r.Status != http.StatusOK && r.Status != http.StatusUnprocessableEntity {
				t.Errorf("GET %s: %d", path, r.Status)
			}
			if r := oc.doKey(t, 0, "GET", path, "", ""); bytes.Contains(r.Body, []byte("number-answer")) || r.Status == http.StatusOK && strings.HasPrefix(path, "/ops/numbers/") {
				t.Errorf("GET %s signed out: %d, answered", path, r.Status)
			}
		}
	}
	lines, routes := 0, map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(logs.bytes()))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		lines++
		if m["msg"] == "request" {
			routes[m["route"].(string)]++
		}
		delete(m, "time") // a timestamp's and a latency's digits are not the number's
		delete(m, "latency_ms")
		rest, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if run := numberRuns.Find(rest); run != nil {
			t.Errorf("a log line holds %q of the number: %s", run, sc.Text())
		}
	}
	// The searches were logged, by their routes: the check looked at them.
	n := len(privateSpellings) * 2
	if routes["/ops"] < n || routes["/ops/numbers/:phone"] < n {
		t.Errorf("request lines by route %v over %d lines; want at least %d of /ops and of /ops/numbers/:phone", routes, lines, n)
	}
}

// TestOpsPagesAreNotCachedOrReferred: a searched number sits in the
// page's URL, so every ops answer - the page, its answers to a search,
// the JSON, a refusal and the redirect to sign in - carries
// Cache-Control: no-store and Referrer-Policy: no-referrer: no cache
// keeps it and no link followed from the page sends it on.
func TestOpsPagesAreNotCachedOrReferred(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	noRedirect := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		name, path, key string
		status          int
	}{
		{"the page's search", "/ops?q=" + url.QueryEscape("+44 7400 135791"), opsKey, http.StatusOK},
		{"the look-up", "/ops/numbers/" + url.PathEscape(privateNumber), opsKey, http.StatusOK},
		{"a look-up refused", "/ops/numbers/12345", opsKey, http.StatusUnprocessableEntity},
		{"the search signed out: to sign in", "/ops?q=" + url.QueryEscape(privateNumber), "", http.StatusSeeOther},
		{"the look-up signed out", "/ops/numbers/" + url.PathEscape(privateNumber), "", http.StatusUnauthorized},
		{"the sign-in page", "/ops/login", "", http.StatusOK},
		{"the attack view", "/ops/abuse", opsKey, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", oc.instances[0].srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			res, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != tt.status {
				t.Fatalf("GET %s: %d, want %d", tt.path, res.StatusCode, tt.status)
			}
			for h, want := range map[string]string{"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"} {
				if got := res.Header.Get(h); got != want {
					t.Errorf("%s: got %q, want %q", h, got, want)
				}
			}
		})
	}
}
