package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// overriddenView is the part of GET /ops/abuse that overrides change.
type overriddenView struct {
	Budget struct {
		Hour, Day budgetWindow
	}
	LastHour struct {
		Countries []struct {
			Country string
			Limits  []viewLimit
		}
		Prefixes []struct {
			Prefix string
			Limit  *viewLimit
		}
	} `json:"last_hour"`
}

type budgetWindow struct {
	Enabled, Exhausted, Override bool
	Used, Limit                  int64
}

type viewLimit struct {
	Rule          string
	Limit         int64
	WindowSeconds int64 `json:"window_seconds"`
	Override      bool
}

// readOverridden flushes instance 0's counts and reads its attack view.
func readOverridden(t *testing.T, oc *opsCluster) overriddenView {
	t.Helper()
	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	r := oc.ops(t, 0, "GET", "/ops/abuse?top=50", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/abuse: %d %s", r.Status, r.Body)
	}
	var v overriddenView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (v overriddenView) countryLimit(t *testing.T, country string) viewLimit {
	t.Helper()
	for _, c := range v.LastHour.Countries {
		if c.Country == country {
			for _, l := range c.Limits {
				if l.Rule == "per_country" {
					return l
				}
			}
			t.Fatalf("country %s: limits %+v, want a per_country limit", country, c.Limits)
		}
	}
	t.Fatalf("country %s: not in the view", country)
	return viewLimit{}
}

func (v overriddenView) prefixLimit(t *testing.T, prefix string) viewLimit {
	t.Helper()
	for _, p := range v.LastHour.Prefixes {
		if p.Prefix == prefix && p.Limit != nil && p.Limit.Rule == "per_prefix" {
			return *p.Limit
		}
	}
	t.Fatalf("prefix %s: no per_prefix row in the view", prefix)
	return viewLimit{}
}

// TestAbuseViewShowsOverrides: with emergency overrides tightening the
// hourly budget, a country and a prefix, and turning on a daily budget the
// policy file does not have, GET /ops/abuse, the ops page and the budget
// gauges show the limits the sends are refused by, marked as the
// overrides'; once removed, the file's again. Real Redis.
func TestAbuseViewShowsOverrides(t *testing.T) {
	clock := &fakeClock{}
	clock.Set(time.Now())
	pol := defaults()
	pol.OTP.Budget = guard.Budget{PerHour: 50}
	pol.OTP.PerCountry = map[string]guard.Window{"GB": {Limit: 40, Window: time.Hour}, "NG": {Limit: 30, Window: time.Hour}}
	pol.OTP.CountryVelocity.Mode = guard.VelocityOff
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &pol, opts: []app.Option{app.WithClock(clock.Now)}})
	const gb1, gb2, ng = "+447400100201", "+447400100202", "+2348031000101"
	gbPrefix := guard.Prefix(gb1, guard.DefaultDigitsDropped)

	var ids []int64
	for _, body := range []string{
		`{"kind":"budget_per_hour","limit":2,"reason":"spend cap"}`,
		`{"kind":"budget_per_day","limit":10,"reason":"spend cap"}`,
		`{"kind":"country_limit","subject":"GB","limit":5,"reason":"wave"}`,
		`{"kind":"prefix_limit","subject":"` + gbPrefix + `","limit":3,"reason":"wave"}`,
	} {
		ids = append(ids, addOverride(t, oc, 0, body))
	}
	for _, s := range []struct {
		phone, code string
		status      int
	}{{ng, "", 200}, {gb1, "", 200}, {gb2, string(problem.CodeBudgetExhausted), 503}} {
		if status, code := oc.send(t, 0, s.phone); status != s.status || code != s.code {
			t.Fatalf("send %s: %d %q, want %d %q (the override's budget of 2)", s.phone, status, code, s.status, s.code)
		}
	}

	v := readOverridden(t, oc)
	if d := cmp.Diff(budgetWindow{Enabled: true, Exhausted: true, Override: true, Used: 2, Limit: 2}, v.Budget.Hour); d != "" {
		t.Errorf("budget.hour (-want +got):\n%s", d)
	}
	// The file has no daily budget: the override's is the one in force.
	if d := cmp.Diff(budgetWindow{Enabled: true, Override: true, Used: 2, Limit: 10}, v.Budget.Day); d != "" {
		t.Errorf("budget.day (-want +got):\n%s", d)
	}
	if d := cmp.Diff(viewLimit{Rule: "per_country", Limit: 5, WindowSeconds: 3600, Override: true}, v.countryLimit(t, "GB")); d != "" {
		t.Errorf("GB's limit (-want +got):\n%s", d)
	}
	if d := cmp.Diff(viewLimit{Rule: "per_country", Limit: 30, WindowSeconds: 3600}, v.countryLimit(t, "NG")); d != "" {
		t.Errorf("NG's limit, the file's (-want +got):\n%s", d)
	}
	if d := cmp.Diff(viewLimit{Rule: "per_prefix", Limit: 3, WindowSeconds: 3600, Override: true}, v.prefixLimit(t, gbPrefix)); d != "" {
		t.Errorf("%s's limit (-want +got):\n%s", gbPrefix, d)
	}

	// The gauges the "budget nearly spent" alert reads.
	fams := scrape(t, oc.cluster, 0)
	wantSample(t, fams, 2, "otpguard_sms_budget_limit", "window", "hour")
	wantSample(t, fams, 1, "otpguard_sms_budget_override", "window", "hour")
	wantSample(t, fams, 2, "otpguard_sms_budget_used", "window", "hour")
	wantSample(t, fams, 10, "otpguard_sms_budget_limit", "window", "day")
	wantSample(t, fams, 1, "otpguard_sms_budget_override", "window", "day")

	// The page marks the overrides' limits, and only those.
	page := oc.ops(t, 0, "GET", "/ops", "")
	if page.Status != http.StatusOK {
		t.Fatalf("GET /ops: %d", page.Status)
	}
	mark := `class="badge warn override"`
	for _, c := range []struct {
		what, re string
		marked   bool
	}{
		{"the hourly budget card", `(?s)<div class="card budget[^"]*" data-window="Spend budget, hour">.*?</h3>`, true},
		{"GB's row", `(?s)<tr class="country-row" data-country="GB">.*?</tr>`, true},
		{"NG's row", `(?s)<tr class="country-row" data-country="NG">.*?</tr>`, false},
		{gbPrefix + "'s row", `(?s)<tr class="prefix-row" data-prefix="&#43;` + gbPrefix[1:] + `">.*?</tr>`, true}, // + escaped in an attribute
	} {
		html := regexp.MustCompile(c.re).Find(page.Body)
		if html == nil {
			t.Errorf("the page has no %s", c.what)
			continue
		}
		if got := strings.Contains(string(html), mark); got != c.marked {
			t.Errorf("%s marked as an override: %v, want %v:\n%s", c.what, got, c.marked, html)
		}
	}

	// Removed: the file's limits again, in the view and the gauges.
	for _, id := range ids {
		if r := oc.ops(t, 0, "DELETE", fmt.Sprintf("/ops/overrides/%d", id), ""); r.Status != http.StatusNoContent {
			t.Fatalf("DELETE override %d: %d %s", id, r.Status, r.Body)
		}
	}
	v = readOverridden(t, oc)
	if d := cmp.Diff(budgetWindow{Enabled: true, Used: 2, Limit: 50}, v.Budget.Hour); d != "" {
		t.Errorf("budget.hour after the removal (-want +got):\n%s", d)
	}
	if d := cmp.Diff(budgetWindow{Used: 2}, v.Budget.Day); d != "" {
		t.Errorf("budget.day after the removal (-want +got):\n%s", d)
	}
	if d := cmp.Diff(viewLimit{Rule: "per_country", Limit: 40, WindowSeconds: 3600}, v.countryLimit(t, "GB")); d != "" {
		t.Errorf("GB's limit after the removal (-want +got):\n%s", d)
	}
	fams = scrape(t, oc.cluster, 0)
	wantSample(t, fams, 50, "otpguard_sms_budget_limit", "window", "hour")
	wantSample(t, fams, 0, "otpguard_sms_budget_override", "window", "hour")
	for _, name := range []string{"otpguard_sms_budget_limit", "otpguard_sms_budget_override"} {
		if v, ok := sample(fams, name, "window", "day"); ok {
			t.Errorf("%s{window=day} = %v after the removal, want absent (the file has no daily budget)", name, v)
		}
	}
}
