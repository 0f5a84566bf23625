package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// overridePolicies are the defaults with a per-country limit for GB and
// the country velocity rule off (these tests send many codes to one
// country within one frozen minute).
func overridePolicies() *guard.Policies {
	p := defaults()
	p.OTP.PerCountry = map[string]guard.Window{"GB": {Limit: 4, Window: time.Hour}}
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	return &p
}

// overrideCluster is two instances sharing one Redis and one database, on a
// fake clock, whose background refresh is too slow to matter: the test
// drives it (refresh).
func overrideCluster(t *testing.T, engine string) (*opsCluster, *fakeClock) {
	t.Helper()
	clock := &fakeClock{}
	clock.Set(time.Now())
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine, policies: overridePolicies(), refresh: time.Minute,
		opts: []app.Option{app.WithClock(clock.Now)}})
	return oc, clock
}

// refresh runs instance i's deny-list refresh once, as its ticker does
// every OTPGUARD_DENYLIST_REFRESH: the overrides are loaded with it.
func (oc *opsCluster) refresh(t *testing.T, i int) {
	t.Helper()
	if err := oc.nodes[i].deny.Reload(context.Background()); err != nil {
		t.Fatalf("refresh instance %d: %v", i, err)
	}
}

// numbers are distinct valid numbers of one country: no per-number limit
// or cooldown gets in the way.
func numbers(format string, from int) func() string {
	n := from
	return func() string { n++; return fmt.Sprintf(format, n) }
}

func addOverride(t *testing.T, oc *opsCluster, i int, body string) int64 {
	t.Helper()
	r := oc.ops(t, i, "POST", "/ops/overrides", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("POST /ops/overrides %s: %d %s", body, r.Status, r.Body)
	}
	return int64(r.json(t)["id"].(float64))
}

// TestOverrideEnforcedByEveryInstance: an override made on instance 0 is
// enforced there at once and by instance 1 at its next refresh; removing it
// returns both to the file's value. On both engines.
func TestOverrideEnforcedByEveryInstance(t *testing.T) {
	for _, engine := range []string{sqlstore.EnginePostgres, sqlstore.EngineSQLite} {
		t.Run(engine, func(t *testing.T) {
			oc, _ := overrideCluster(t, engine)
			ng := numbers("+23480310%05d", 100)

			id := addOverride(t, oc, 0, `{"kind":"country_pause","subject":"NG","reason":"pumping wave"}`)
			if status, code := oc.send(t, 0, ng()); status != http.StatusForbidden || code != string(problem.CodeCountryPaused) {
				t.Errorf("instance 0 right after the pause: %d %s, want 403 country_paused", status, code)
			}
			// Instance 1 has not refreshed yet: it still sends. (The refresh,
			// not chance, is what brings the override.)
			if status, code := oc.send(t, 1, ng()); status != http.StatusOK {
				t.Errorf("instance 1 before its refresh: %d %s, want 200", status, code)
			}
			oc.refresh(t, 1)
			r := oc.do(t, 1, "POST", "/otp/send", `{"phone":"`+ng()+`"}`)
			if r.Status != http.StatusForbidden || r.json(t)["code"] != string(problem.CodeCountryPaused) || r.Header.Get("Retry-After") == "" {
				t.Errorf("instance 1 after its refresh: %d %s (Retry-After %q), want 403 country_paused with Retry-After",
					r.Status, r.Body, r.Header.Get("Retry-After"))
			}
			// Other countries are not paused.
			if status, code := oc.send(t, 1, "+447400000123"); status != http.StatusOK {
				t.Errorf("GB while NG is paused: %d %s, want 200", status, code)
			}

			if r := oc.ops(t, 0, "DELETE", fmt.Sprintf("/ops/overrides/%d", id), ""); r.Status != http.StatusNoContent {
				t.Fatalf("DELETE override: %d %s", r.Status, r.Body)
			}
			oc.refresh(t, 1)
			for i := range 2 {
				if status, code := oc.send(t, i, ng()); status != http.StatusOK {
					t.Errorf("instance %d after the removal: %d %s, want 200", i, status, code)
				}
			}

			// Audited with the actor, add and remove.
			var actions []string
			for _, e := range auditEvents(t, oc) {
				if strings.HasPrefix(e.Action, "ops.override") {
					actions = append(actions, e.Action+" "+e.Outcome+" "+e.Country)
					if e.Actor == "" {
						t.Errorf("audit event %s without an actor", e.Action)
					}
				}
			}
			if want := []string{"ops.override.remove removed NG", "ops.override.add added NG"}; fmt.Sprint(actions) != fmt.Sprint(want) {
				t.Errorf("audit: %v, want %v", actions, want)
			}
		})
	}
}

func auditEvents(t *testing.T, oc *opsCluster) []guard.Event {
	t.Helper()
	events, err := oc.instances[0].app.SQL().ListEvents(context.Background(), ops.EventFilter{Limit: ops.MaxEventLimit})
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	return events
}

// TestOverrideTightensNeverLoosens: a limit above the file's is refused
// with 422 naming the field; a lower one applies on the same counter as
// the file's (across both instances); removing it returns to the file's.
func TestOverrideTightensNeverLoosens(t *testing.T) {
	oc, _ := overrideCluster(t, sqlstore.EnginePostgres)
	gb := numbers("+4474001%05d", 200)

	r := oc.ops(t, 0, "POST", "/ops/overrides", `{"kind":"country_limit","subject":"GB","limit":50,"reason":"wave"}`)
	body := r.json(t)
	if r.Status != http.StatusUnprocessableEntity || body["code"] != string(problem.CodeOverrideLooser) || body["field"] != "limit" ||
		!strings.Contains(fmt.Sprint(body["detail"]), "otp.per_country.GB.limit (4)") {
		t.Errorf("looser override: %d %s, want 422 override_looser naming limit and otp.per_country.GB.limit (4)", r.Status, r.Body)
	}
	for _, bad := range []struct{ body, field string }{
		{`{"kind":"country_limit","subject":"GB","limit":2}`, "reason"},
		{`{"kind":"country_limit","subject":"Britain","limit":2,"reason":"x"}`, "subject"},
		{`{"kind":"country_pause","subject":"GB","limit":2,"reason":"x"}`, "limit"},
		{`{"kind":"budget_per_hour","limit":2,"reason":"x","expires_in":604801}`, "expires_in"},
		// Bidirectional controls would show the reason reversed on the page.
		{`{"kind":"country_limit","subject":"GB","limit":2,"reason":"wave \u202eevaw"}`, "reason"},
		{`{"kind":"country_limit","subject":"GB","limit":2,"reason":"wave \u2067x\u2069"}`, "reason"},
	} {
		r := oc.ops(t, 0, "POST", "/ops/overrides", bad.body)
		if got := r.json(t); r.Status != http.StatusBadRequest || got["field"] != bad.field {
			t.Errorf("%s: %d %s, want 400 naming %s", bad.body, r.Status, r.Body, bad.field)
		}
	}

	id := addOverride(t, oc, 0, `{"kind":"country_limit","subject":"GB","limit":2,"reason":"wave","expires_in":3600}`)
	oc.refresh(t, 1)
	list := oc.ops(t, 1, "GET", "/ops/overrides", "").json(t)["overrides"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["file_limit"] != float64(4) || list[0].(map[string]any)["expires_in_seconds"] != float64(3600) {
		t.Errorf("GET /ops/overrides: %v, want the one override, file_limit 4 and 3600 s left", list)
	}
	for i, want := range []int{200, 200, 429} { // the override's 2, across the instances
		if status, code := oc.send(t, i%2, gb()); status != want {
			t.Errorf("send %d under the override of 2: %d %s, want %d", i+1, status, code, want)
		}
	}
	if r := oc.ops(t, 1, "DELETE", fmt.Sprintf("/ops/overrides/%d", id), ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.Status, r.Body)
	}
	oc.refresh(t, 0)
	// Back to the file's 4 on the same counter: 3 counted (the refused hit
	// too, as the file's own limits count it), so one more.
	for i, want := range []int{200, 429} {
		if status, code := oc.send(t, i%2, gb()); status != want {
			t.Errorf("send after the removal %d: %d %s, want %d", i+1, status, code, want)
		}
	}
}

// TestOverrideExpires: an override stops applying when its time is up, by
// the service's clock (a fake one here), without anyone removing it.
func TestOverrideExpires(t *testing.T) {
	oc, clock := overrideCluster(t, sqlstore.EngineSQLite)
	gh := numbers("+23324%07d", 300)
	addOverride(t, oc, 0, `{"kind":"budget_per_hour","limit":1,"reason":"spend cap","expires_in":60}`)
	oc.refresh(t, 1)
	if status, code := oc.send(t, 1, gh()); status != http.StatusOK {
		t.Fatalf("first send under a budget of 1: %d %s", status, code)
	}
	if status, code := oc.send(t, 0, gh()); status != http.StatusServiceUnavailable || code != string(problem.CodeBudgetExhausted) {
		t.Errorf("second send under a budget of 1: %d %s, want 503 budget_exhausted", status, code)
	}
	clock.Add(61 * time.Second)
	// Without a refresh, too: each instance checks the expiry by the clock.
	for i := range 2 {
		if status, code := oc.send(t, i, gh()); status != http.StatusOK {
			t.Errorf("instance %d after the override expired: %d %s, want 200 (the file has no budget)", i, status, code)
		}
	}
	oc.refresh(t, 1)
	if got := oc.ops(t, 1, "GET", "/ops/overrides", "").json(t)["overrides"].([]any); len(got) != 0 {
		t.Errorf("GET /ops/overrides after the expiry: %v, want none", got)
	}
}
