package httpapi_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestCarrierOverridesAcrossInstances: a carrier_limit of NG / MTN made
// on one instance holds exactly over three instances sharing one Redis,
// with sends to MTN's numbers fired at all three at once, while Glo's
// numbers still go; then a carrier_pause refuses MTN's numbers only (403
// carrier_paused with Retry-After), on every instance. Audited as "NG /
// MTN". Real Redis.
func TestCarrierOverridesAcrossInstances(t *testing.T) {
	p := defaults()
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	oc := newOpsCluster(t, opsConfig{instances: 3, engine: sqlstore.EngineSQLite, policies: &p, refresh: time.Minute})

	const limit = 12
	r := oc.ops(t, 0, "POST", "/ops/overrides", `{"kind":"carrier_limit","subject":"ng / MTN","limit":12,"reason":"wave on MTN"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("POST carrier_limit: %d %s", r.Status, r.Body)
	}
	if got := r.json(t); got["subject"] != "NG/mtn" || got["subject_name"] != "NG / MTN" {
		t.Errorf("carrier_limit as stored: subject %v, subject_name %v; want NG/mtn, NG / MTN", got["subject"], got["subject_name"])
	}
	limitID := int64(r.json(t)["id"].(float64))
	oc.refresh(t, 1)
	oc.refresh(t, 2)

	const sends = 60
	var wg sync.WaitGroup
	var sent, limited atomic.Int64
	for i := range sends {
		wg.Go(func() {
			phone := fmt.Sprintf("+234803%07d", 1000*i+7) // MTN's, each under a prefix of its own
			r := oc.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":"10.9.%d.1"}`, phone, i))
			switch code := problemCode(t, r); code {
			case "":
				sent.Add(1)
			case string(problem.CodeCarrierRateLimited):
				limited.Add(1)
				if s, err := strconv.Atoi(r.Header.Get("Retry-After")); r.Status != http.StatusTooManyRequests || err != nil || s < 1 || s > 3600 {
					t.Errorf("carrier_rate_limited: %d, Retry-After %q; want 429 with 1..3600 seconds", r.Status, r.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("send %s: %d %s", phone, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if sent.Load() != limit || limited.Load() != sends-limit || oc.out.Count() != limit {
		t.Errorf("%d concurrent sends to NG / MTN over 3 instances, carrier_limit %d: %d sent (outbox %d), %d carrier_rate_limited; want exactly %d and %d",
			sends, limit, sent.Load(), oc.out.Count(), limited.Load(), limit, sends-limit)
	}
	for i := range 3 {
		if status, code := oc.send(t, i, fmt.Sprintf("+23480510000%02d", i)); status != http.StatusOK {
			t.Errorf("instance %d, Glo's number while MTN is limited: %d %s, want 200", i, status, code)
		}
	}

	// The pause: MTN refused on every instance, Glo and Airtel not.
	if r := oc.ops(t, 0, "DELETE", fmt.Sprintf("/ops/overrides/%d", limitID), ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE carrier_limit: %d %s", r.Status, r.Body)
	}
	addOverride(t, oc, 0, `{"kind":"carrier_pause","subject":"NG/Mtn","reason":"pumping on MTN","expires_in":1800}`)
	oc.refresh(t, 1)
	oc.refresh(t, 2)
	for i := range 3 {
		r := oc.do(t, i, "POST", "/otp/send", `{"phone":"+2348031234567"}`)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); r.Status != http.StatusForbidden || problemCode(t, r) != string(problem.CodeCarrierPaused) ||
			err != nil || s < 1 || s > 1800 {
			t.Errorf("instance %d, MTN while paused: %d %s (Retry-After %q), want 403 carrier_paused with the pause's time left",
				i, r.Status, r.Body, r.Header.Get("Retry-After"))
		}
		for _, other := range []string{fmt.Sprintf("+23480510001%02d", i), fmt.Sprintf("+23480210001%02d", i)} {
			if status, code := oc.send(t, i, other); status != http.StatusOK {
				t.Errorf("instance %d, %s while MTN is paused: %d %s, want 200", i, other, status, code)
			}
		}
	}

	var details []string
	for _, e := range auditEvents(t, oc) {
		if e.Action == "ops.override.add" {
			details = append(details, e.Country+" "+e.Detail)
		}
	}
	if len(details) != 2 {
		t.Fatalf("audit: %d override additions, want 2: %q", len(details), details)
	}
	for _, d := range details {
		if !strings.HasPrefix(d, "NG ") || !strings.Contains(d, `subject=NG/mtn carrier="NG / MTN"`) {
			t.Errorf("audit detail %q, want the country NG and the carrier named NG / MTN", d)
		}
	}
}
