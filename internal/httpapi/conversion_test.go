package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// conversionCluster is two instances on a real Redis and SQLite, with the
// conversion watch judging after minSends sends at min_rate 0.5, at once
// (no delay), and no country velocity rule (a country alert in block mode
// would quarantine the country; pumping_campaign_test.go shows that).
func conversionCluster(t *testing.T, mode guard.ConversionMode) *opsCluster {
	t.Helper()
	p := defaults()
	p.OTP.Conversion = guard.ConversionPolicy{Mode: mode, MinRate: 0.5, MinSends: 5, BlockFor: 10 * time.Minute}
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	return newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &p})
}

// blockedPrefixes lists the deny-list rows of the ops view.
func blockedPrefixes(t *testing.T, oc *opsCluster) map[string]map[string]any {
	t.Helper()
	r := oc.ops(t, 0, "GET", "/ops/blocked", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/blocked: %d %s", r.Status, r.Body)
	}
	var page struct {
		Blocks []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal(r.Body, &page); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, b := range page.Blocks {
		out[b["phone"].(string)] = b
	}
	return out
}

// TestConversionWatchBlocks: codes sent to one prefix and never verified
// get the prefix blocked (a deny-list entry with expiry, shown in the ops
// view with its reason and author, and lifted there), while a prefix whose
// codes are verified keeps its conversion up and is never blocked.
func TestConversionWatchBlocks(t *testing.T) {
	oc := conversionCluster(t, guard.ConversionBlock)

	// Pumped: five codes to +9198111 0xxxx, none verified.
	for i := range 5 {
		if status, code := oc.send(t, i, fmt.Sprintf("+91981110%04d", i)); status != http.StatusOK {
			t.Fatalf("send %d: %d %s", i, status, code)
		}
	}
	// Real users: +9198222 0xxxx, four of five verified: 80% conversion.
	for i := range 5 {
		phone := fmt.Sprintf("+91982220%04d", i)
		if status, code := oc.send(t, i, phone); status != http.StatusOK {
			t.Fatalf("send %s: %d %s", phone, status, code)
		}
		if i == 4 {
			continue
		}
		r := oc.do(t, i+1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`)
		if r.Status != http.StatusOK {
			t.Fatalf("verify %s: %d %s", phone, r.Status, r.Body)
		}
	}

	// The pumped prefix is on the deny-list, on every instance once it reloads.
	opsWait(t, "the pumped prefix refused on both instances", func() bool {
		a, _ := oc.send(t, 0, "+919811109999")
		b, _ := oc.send(t, 1, "+919811109998")
		return a == http.StatusForbidden && b == http.StatusForbidden
	})
	if status, code := oc.send(t, 0, "+919822209999"); status != http.StatusOK {
		t.Errorf("send to the converting prefix: %d %s, want 200", status, code)
	}

	blocked := blockedPrefixes(t, oc)
	row, ok := blocked["+91981110"]
	if !ok {
		t.Fatalf("the ops view does not list the pumped prefix: %v", blocked)
	}
	if row["author"] != guard.ConversionActor || !strings.Contains(fmt.Sprint(row["note"], row["reason"]), "conversion") || row["until"] == nil {
		t.Errorf("ops view row: %v; want author %s, a reason naming the conversion watch, an expiry", row, guard.ConversionActor)
	}
	if _, ok := blocked["+91982220"]; ok {
		t.Error("the converting prefix is blocked")
	}

	// The coarser depths (prefix_depths) of the pumped numbers are blocked
	// too: their codes were not verified either.
	for _, p := range []string{"+919811", "+91981"} {
		if _, ok := blocked[p]; !ok {
			t.Errorf("the ops view does not list the pumped coarse prefix %s: %v", p, blocked)
		}
	}
	// Lifted in the ops view: sends go through again.
	for p, row := range blocked {
		if !strings.HasPrefix("+919811109997", p) {
			continue
		}
		id := int64(row["deny_id"].(float64))
		if r := oc.ops(t, 0, "DELETE", fmt.Sprintf("/ops/denylist/%d", id), ""); r.Status != http.StatusNoContent && r.Status != http.StatusOK {
			t.Fatalf("DELETE /ops/denylist/%d: %d %s", id, r.Status, r.Body)
		}
	}
	if status, code := oc.send(t, 0, "+919811109997"); status != http.StatusOK {
		t.Errorf("send after lifting the block: %d %s, want 200", status, code)
	}
}

// TestConversionWatchMonitor: the same pumping in monitor mode only reports:
// sends go on, nothing is deny-listed, one audit event and one metric.
func TestConversionWatchMonitor(t *testing.T) {
	oc := conversionCluster(t, guard.ConversionMonitor)
	for i := range 8 {
		if status, code := oc.send(t, i, fmt.Sprintf("+91981110%04d", i)); status != http.StatusOK {
			t.Fatalf("send %d in monitor mode: %d %s, want 200", i, status, code)
		}
	}
	if len(oc.nodes[0].deny.Entries()) != 0 || len(blockedPrefixes(t, oc)) != 0 {
		t.Errorf("monitor mode blocked something: %v", blockedPrefixes(t, oc))
	}
	depths := 1 + len(defaults().OTP.PrefixDepths)
	var reports []guard.Event
	opsWait(t, "the conversion report in the audit trail", func() bool {
		events, err := oc.nodes[0].db.ListEvents(t.Context(), ops.EventFilter{Action: guard.ActionConversion})
		if err != nil {
			t.Fatal(err)
		}
		reports = events
		return len(events) >= depths+1 // the prefix at each depth and the country
	})
	scopes := map[string]int{}
	for _, e := range reports {
		if e.Outcome != "reported" {
			t.Errorf("conversion event outcome %q, want reported", e.Outcome)
		}
		scopes[strings.SplitN(e.Detail, "=", 2)[0]]++
	}
	if scopes["prefix"] != depths || scopes["country"] != 1 {
		t.Errorf("conversion reports per scope: %v, want one prefix per depth (%d) and one country (once per hour, across instances)", scopes, depths)
	}
	var alerts float64
	for i := range oc.instances {
		r := oc.doKey(t, i, "GET", "/metrics", "", "")
		for _, line := range strings.Split(string(r.Body), "\n") {
			if strings.HasPrefix(line, `otpguard_conversion_alerts_total{action="reported",scope="prefix"}`) {
				var v float64
				if _, err := fmt.Sscan(strings.Fields(line)[1], &v); err != nil {
					t.Fatalf("metrics line %q: %v", line, err)
				}
				alerts += v
			}
		}
	}
	if alerts != float64(depths) {
		t.Errorf("otpguard_conversion_alerts_total{prefix,reported} over the instances: got %v, want %d (one per depth)", alerts, depths)
	}
}
