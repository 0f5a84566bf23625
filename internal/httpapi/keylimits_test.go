package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// keyFrom sends method path with a bearer key to instance i, from the
// address from (X-Forwarded-For, believed from loopback in these tests).
func keyFrom(t *testing.T, oc *opsCluster, i int, from, method, path, body, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, oc.instances[i%len(oc.instances)].srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", from)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// atOnce sends n requests at once, spread over the instances, and counts
// their statuses; every 429 must carry Retry-After.
func atOnce(t *testing.T, n int, send func(g int) *http.Response) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			res := send(g)
			mu.Lock()
			defer mu.Unlock()
			statuses[res.StatusCode]++
			if res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}
	wg.Wait()
	return statuses
}

// auditedEvents waits for the audit queues to drain and returns the events
// of action.
func auditedEvents(t *testing.T, oc *opsCluster, action string) []guard.Event {
	t.Helper()
	opsWait(t, "the audit queues to drain", func() bool {
		for _, n := range oc.nodes {
			if n.audit.Len() > 0 {
				return false
			}
		}
		return true
	})
	events, err := oc.nodes[0].db.ListEvents(t.Context(), ops.EventFilter{Action: action, Limit: ops.MaxEventLimit})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestOpsStatusIsBehindTheSignInLimit: GET /ops/status checks an ops key
// like every ops route: wrong keys sent at once to two instances are
// answered exactly up to the sign-in limit, the rest 429, each answered one
// audited; from the locked-out address the right key is refused too.
func TestOpsStatusIsBehindTheSignInLimit(t *testing.T) {
	const failures = 3
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, trustProxies: loopback,
		signIn: ops.SignInLimit{Failures: failures, Window: time.Minute}})
	const guesser = "203.0.113.9"

	if res := keyFrom(t, oc, 0, guesser, "GET", "/ops/status", "", opsKey); res.StatusCode != 200 {
		t.Fatalf("right key before any failure: %d", res.StatusCode)
	}
	statuses := atOnce(t, 20, func(g int) *http.Response {
		return keyFrom(t, oc, g, guesser, "GET", "/ops/status", "", fmt.Sprintf("guess-%02d-0123456789abcdef", g))
	})
	if statuses[401] != failures || statuses[429] != 20-failures {
		t.Errorf("statuses %v: want exactly %d checked (401) and %d refused (429)", statuses, failures, 20-failures)
	}
	for i := range 2 {
		if res := keyFrom(t, oc, i, guesser, "GET", "/ops/status", "", opsKey); res.StatusCode != 429 {
			t.Errorf("instance %d: the right key from the locked-out address: %d, want 429", i, res.StatusCode)
		}
	}
	if res := keyFrom(t, oc, 1, "198.51.100.20", "GET", "/ops/status", "", opsKey); res.StatusCode != 200 {
		t.Errorf("another address: %d, want 200", res.StatusCode)
	}
	var failed int
	for _, e := range auditedEvents(t, oc, ops.ActionLogin) {
		if e.Outcome == ops.OutcomeFailed && e.IP == guesser {
			failed++
		}
	}
	if failed != failures {
		t.Errorf("%d failed sign-ins audited from %s, want %d (one per key checked)", failed, guesser, failures)
	}
}

// TestWrongAPIKeysAreThrottled: wrong API keys sent at once to two
// instances are answered exactly up to the limit per address, the rest
// 429 with Retry-After, and audited as one summary; the address's right
// key is refused too once it is locked out; right keys from other
// addresses, many at once, spend nothing and are never held back.
func TestWrongAPIKeysAreThrottled(t *testing.T) {
	const failures = 5
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, trustProxies: loopback,
		apiKeys: ops.SignInLimit{Failures: failures, Window: time.Minute}})
	const guesser, app = "203.0.113.9", "198.51.100.20"
	check := `{"policy":"default","key":"k","cost":0}`

	// A busy caller with the right key: never a 429 from the key limit.
	if got := atOnce(t, 40, func(g int) *http.Response {
		return keyFrom(t, oc, g, app, "POST", "/limits/check", check, apiKey)
	}); got[200] != 40 {
		t.Fatalf("40 right keys at once from one address: %v, want 40 200s", got)
	}

	statuses := atOnce(t, 40, func(g int) *http.Response {
		return keyFrom(t, oc, g, guesser, "POST", "/limits/check", check, fmt.Sprintf("guess-%02d-0123456789abcdef", g))
	})
	t.Logf("40 wrong API keys over 2 instances, limit %d: %v", failures, statuses)
	if statuses[401] != failures || statuses[429] != 40-failures {
		t.Errorf("statuses %v: want exactly %d checked (401) and %d refused (429)", statuses, failures, 40-failures)
	}
	for i := range 2 {
		if res := keyFrom(t, oc, i, guesser, "POST", "/limits/check", check, apiKey); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
			t.Errorf("instance %d: the right key from the locked-out address: %d (Retry-After %q), want 429 with Retry-After",
				i, res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	if res := keyFrom(t, oc, 0, app, "POST", "/otp/send", `{"phone":"+14155550100"}`, apiKey); res.StatusCode != 200 {
		t.Errorf("the right key from another address: %d, want 200", res.StatusCode)
	}
	// An ops key on the API is the wrong kind of key, not a guess.
	if res := keyFrom(t, oc, 0, app, "POST", "/limits/check", check, opsKey); res.StatusCode != 403 {
		t.Errorf("an ops key on the API: %d, want 403", res.StatusCode)
	}

	opsWait(t, "the lock-out in the audit trail", func() bool { return len(auditedEvents(t, oc, ops.ActionAPIKeys)) > 0 })
	events := auditedEvents(t, oc, ops.ActionAPIKeys)
	if len(events) != 1 || events[0].IP != guesser || events[0].Outcome != ops.OutcomeLockedOut {
		t.Errorf("audited %+v, want one %s %s event from %s", events, ops.ActionAPIKeys, ops.OutcomeLockedOut, guesser)
	}
}
