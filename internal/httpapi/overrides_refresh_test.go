package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// TestOverrideReachesEveryInstanceByItself: with OTPGUARD_DENYLIST_REFRESH
// at its least (100ms), an override added on instance 0 comes to be
// enforced by instance 1 with nobody refreshing it by hand (its own refresh
// loop loads it), and so does the override's removal. On both engines.
// How long that takes is not asserted: the generous deadline only tells a
// busy machine from a loop that never runs (TestOverrideEnforcedByEveryInstance
// holds "at the next refresh" by calling the refresh itself).
func TestOverrideReachesEveryInstanceByItself(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			p := overridePolicies()
			// The polling sends many codes under one prefix.
			p.OTP.PerPrefix.Limit, p.OTP.PrefixDepths = 0, nil
			oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine, policies: p, refresh: 100 * time.Millisecond})
			ng := numbers("+23480310%05d", 500)
			// Instance 1 sends to NG before the pause: what changes below is
			// the pause's doing.
			if status, code := oc.send(t, 1, ng()); status != http.StatusOK {
				t.Fatalf("instance 1 before the pause: %d %s, want 200", status, code)
			}

			id := addOverride(t, oc, 0, `{"kind":"country_pause","subject":"NG","reason":"pumping wave"}`)
			paused := sendOutcome{http.StatusForbidden, string(problem.CodeCountryPaused)}
			sent := sendOutcome{status: http.StatusOK}
			took := sendUntil(t, oc, 1, ng, sent, paused)
			t.Logf("instance 1 enforced the pause after %v", took)

			if r := oc.ops(t, 0, "DELETE", fmt.Sprintf("/ops/overrides/%d", id), ""); r.Status != http.StatusNoContent {
				t.Fatalf("DELETE override: %d %s", r.Status, r.Body)
			}
			took = sendUntil(t, oc, 1, ng, paused, sent)
			t.Logf("instance 1 sent again after %v", took)
		})
	}
}

// sendOutcome is the status and problem code of a send ("" for a 200).
type sendOutcome struct {
	status int
	code   string
}

func (o sendOutcome) String() string {
	return strings.TrimSpace(fmt.Sprintf("%d %s", o.status, o.code))
}

// overrideDeadline is how long an instance may take to load an override
// by itself before the test gives up: far beyond the 100ms refresh, so
// that only a refresh that never comes fails.
const overrideDeadline = 20 * time.Second

// sendUntil sends to instance i, a new number each time, until it answers
// want, and returns how long that took. Until then every answer must be
// was (the answer before the change); any other, or no change by
// overrideDeadline, fails the test.
func sendUntil(t *testing.T, oc *opsCluster, i int, next func() string, was, want sendOutcome) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		status, code := oc.send(t, i, next())
		switch got := (sendOutcome{status, code}); got {
		case want:
			return time.Since(start)
		case was:
		default:
			t.Fatalf("instance %d: %v, want %v (or %v until it changes)", i, got, want, was)
		}
		if time.Since(start) > overrideDeadline {
			t.Fatalf("instance %d still answers %v after %v, want %v: it did not load the change by itself", i, was, overrideDeadline, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
