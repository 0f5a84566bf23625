package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// signInFrom tries key at instance i by the sign-in form (form) or as a
// bearer on the ops API, with the forwarding header xff ("" for none).
func signInFrom(t *testing.T, oc *opsCluster, i int, xff, key string, form bool) *http.Response {
	t.Helper()
	var req *http.Request
	if form {
		req, _ = http.NewRequest("POST", oc.instances[i].srv.URL+"/ops/login", strings.NewReader(url.Values{"key": {key}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req, _ = http.NewRequest("GET", oc.instances[i].srv.URL+"/ops/denylist", nil)
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	res, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// failedLogins returns the addresses of the failed ops sign-ins audited.
func failedLogins(t *testing.T, oc *opsCluster, want int) []string {
	t.Helper()
	var events []guard.Event
	opsWait(t, fmt.Sprintf("%d failed sign-ins in the audit trail", want), func() bool {
		var err error
		events, err = oc.nodes[0].db.ListEvents(t.Context(), ops.EventFilter{Action: ops.ActionLogin, Limit: ops.MaxEventLimit})
		if err != nil {
			t.Fatal(err)
		}
		return len(events) >= want
	})
	var ips []string
	for _, e := range events {
		if e.Outcome == ops.OutcomeFailed {
			ips = append(ips, e.IP)
		}
	}
	return ips
}

// TestForwardedForIsBelievedOnlyFromTrustedProxies: with no trusted
// proxies (the default) a caller cannot rotate or forge the address it is
// limited and audited by; behind a trusted proxy the right-most hop the
// proxy did not add is the client, whatever the caller wrote to its left.
func TestForwardedForIsBelievedOnlyFromTrustedProxies(t *testing.T) {
	const failures = 4
	limit := ops.SignInLimit{Failures: failures, Window: time.Minute}

	t.Run("no trusted proxies: forged addresses do not rotate", func(t *testing.T) {
		oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, signIn: limit})
		statuses := map[int]int{}
		for i := range 3 * failures {
			res := signInFrom(t, oc, 0, fmt.Sprintf("198.51.100.%d", i+1), "wrong-key-0123456789abcdef", i%2 == 0)
			statuses[res.StatusCode]++
		}
		if statuses[401] != failures || statuses[429] != 2*failures {
			t.Errorf("statuses %v: want %d checked (401), %d refused (429): the forged X-Forwarded-For rotated the limited address",
				statuses, failures, 2*failures)
		}
		for _, ip := range failedLogins(t, oc, failures/2) {
			if ip != "127.0.0.1" {
				t.Errorf("a failed sign-in audited from %q, want the peer 127.0.0.1", ip)
			}
		}
	})

	t.Run("trusted proxy: the right-most untrusted hop", func(t *testing.T) {
		oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, signIn: limit, trustProxies: loopback})
		statuses := map[int]int{}
		for i := range 3 * failures {
			// The left entry is the caller's own invention; the proxy appended 203.0.113.7.
			res := signInFrom(t, oc, 0, fmt.Sprintf("198.51.100.%d, 203.0.113.7", i+1), "wrong-key-0123456789abcdef", i%2 == 0)
			statuses[res.StatusCode]++
		}
		if statuses[401] != failures || statuses[429] != 2*failures {
			t.Errorf("statuses %v: want %d checked (401), %d refused (429), all counted against 203.0.113.7", statuses, failures, 2*failures)
		}
		// Another client of the same proxy is not held back.
		if res := signInFrom(t, oc, 0, "203.0.113.8", opsKey, true); res.StatusCode != http.StatusSeeOther {
			t.Errorf("another client behind the proxy: %d, want 303", res.StatusCode)
		}
		for _, ip := range failedLogins(t, oc, failures/2) {
			if ip != "203.0.113.7" {
				t.Errorf("a failed sign-in audited from %q, want 203.0.113.7", ip)
			}
		}
	})
}
