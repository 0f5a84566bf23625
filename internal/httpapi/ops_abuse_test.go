package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// attackPolicies are the policies of the scripted attack: an hourly spend
// budget of 60, two countries with their own limits, and a conversion
// watch quick enough to fire within the script. The country velocity rule
// is off so that each figure has one cause.
func attackPolicies() guard.Policies {
	p := defaults()
	p.OTP.Budget = guard.Budget{PerHour: 60, PerDay: 500}
	p.OTP.PerCountry = map[string]guard.Window{"NG": {Limit: 20, Window: time.Hour}, "PK": {Limit: 15, Window: time.Hour}}
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.OTP.Conversion.MinSends = 5
	p.OTP.Conversion.Delay = 2 * time.Minute
	return p
}

// attackView is the part of GET /ops/abuse the test checks.
type attackView struct {
	State struct {
		Status, Redis, Breaker string
		Instances              int
	}
	Budget struct {
		Hour, Day struct {
			Enabled, Exhausted bool
			Used, Limit        int64
			ResetsIn           int64 `json:"resets_in_seconds"`
		}
	}
	LastHour, LastDay struct {
		Total     abuseTally
		Countries []struct {
			Country     string
			CallingCode string `json:"calling_code"`
			abuseTally
			Limits []struct {
				Rule          string
				Limit         int64
				WindowSeconds int64 `json:"window_seconds"`
			}
		}
		Prefixes []struct {
			Prefix, Country string
			abuseTally
			Limit *struct {
				Rule  string
				Limit int64
			}
		}
	} `json:"-"`
	Alerts []struct {
		Rule, Scope, Subject, Country, Outcome string
		SecondsLeft                            int64 `json:"seconds_left"`
	}
	AutoBlocks []struct {
		Pattern, Author string
		SecondsLeft     *int64 `json:"seconds_left"`
	} `json:"auto_blocks"`
	Blocks struct {
		Total int
		First []struct{ Phone, Reason string }
	}
}

type abuseTally struct {
	Sends, Refusals, Verifications int64
	ConversionRate                 *float64         `json:"conversion_rate"`
	RefusalsByCode                 map[string]int64 `json:"refusals_by_code"`
}

// TestAbuseViewDuringAttack runs a scripted attack on two instances
// sharing one real Redis (spend the hourly budget, hit two countries'
// limits, raise conversion alerts) and checks GET /ops/abuse, asked of
// either instance, shows it: the same figures on both.
func TestAbuseViewDuringAttack(t *testing.T) {
	clock := &fakeClock{}
	// Ten minutes into the wall clock's hour: the deny-list caches expire
	// entries by the wall clock.
	clock.Set(time.Now().UTC().Truncate(time.Hour).Add(10 * time.Minute))
	pol := attackPolicies()
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &pol,
		opts: []app.Option{app.WithClock(clock.Now)}})
	expect := func(i int, phone string, status int, code string) {
		t.Helper()
		if got, gotCode := oc.send(t, i, phone); got != status || gotCode != code {
			t.Fatalf("send %s: got %d %q, want %d %q", phone, got, gotCode, status, code)
		}
	}
	// Legitimate: 10 GB users, each verifies.
	for i := range 10 {
		phone := fmt.Sprintf("+447400%06d", 100+i)
		expect(i, phone, http.StatusOK, "")
		r := oc.do(t, i+1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`)
		if r.Status != http.StatusOK {
			t.Fatalf("verify %s: %d %s", phone, r.Status, r.Body)
		}
	}
	// Two countries' limits: NG 20 then 5 refused, PK 15 then 5 refused.
	for i := range 25 {
		want, code := http.StatusOK, ""
		if i >= 20 {
			want, code = http.StatusTooManyRequests, "country_rate_limited"
		}
		expect(i, fmt.Sprintf("+234803%07d", 1000+i), want, code)
	}
	for i := range 20 {
		want, code := http.StatusOK, ""
		if i >= 15 {
			want, code = http.StatusTooManyRequests, "country_rate_limited"
		}
		expect(i, fmt.Sprintf("+92300%07d", 1000+i), want, code)
	}
	// A drip into one Indonesian range that nobody verifies (8 codes), then
	// one more after the conversion delay: the watch blocks the range at
	// each prefix depth and reports the country.
	for i := range 8 {
		expect(i, fmt.Sprintf("+62812345678%02d", i), http.StatusOK, "")
	}
	clock.Add(3 * time.Minute)
	expect(0, "+6281234567808", http.StatusOK, "") // 54 sent
	// The budget: 6 more leave, the next 10 are refused 503 budget_exhausted.
	for i := range 16 {
		want, code := http.StatusOK, ""
		if i >= 6 {
			want, code = http.StatusServiceUnavailable, "budget_exhausted"
		}
		expect(i, fmt.Sprintf("+2782%07d", 1000+i), want, code)
	}
	for i, in := range oc.instances {
		if err := in.app.FlushAbuse(context.Background()); err != nil {
			t.Fatalf("instance %d: flush: %v", i, err)
		}
	}
	// The automatic blocks are read from each instance's deny-list copy.
	opsWait(t, "both instances to load the conversion watch's blocks", func() bool {
		for _, n := range oc.nodes {
			if len(n.deny.Entries()) < 3 {
				return false
			}
		}
		return true
	})

	var bodies [2][]byte
	for i := range 2 {
		r := oc.ops(t, i, "GET", "/ops/abuse", "")
		if r.Status != http.StatusOK {
			t.Fatalf("instance %d: GET /ops/abuse: %d %s", i, r.Status, r.Body)
		}
		bodies[i] = r.Body
	}
	// Every instance shows the same (but "at" and the budget's TTL).
	norm := func(b []byte) []byte {
		b = regexp.MustCompile(`"resets_in_seconds":\d+`).ReplaceAll(b, []byte(`"resets_in_seconds":0`))
		return regexp.MustCompile(`"(shed|store_shed|store_late|instances)":\d+`).ReplaceAll(b, []byte(`"$1":0`))
	}
	if a, b := norm(bodies[0]), norm(bodies[1]); !bytes.Equal(a, b) {
		t.Errorf("the two instances disagree:\n%s\n%s", a, b)
	}
	var raw map[string]json.RawMessage
	var v attackView
	if err := json.Unmarshal(bodies[0], &v); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bodies[0], &raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw["last_hour"], &v.LastHour); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw["last_day"], &v.LastDay); err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv("OTPGUARD_ABUSE_EXAMPLE"); path != "" { // docs/ops.md's example
		r := oc.ops(t, 0, "GET", "/ops/abuse?top=3", "")
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, r.Body, "", "  ")
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if v.State.Redis != "up" || v.State.Breaker != "closed" || v.State.Status != "ok" {
		t.Errorf("state: got %+v, want redis up, breaker closed, ok", v.State)
	}
	bh, bd := v.Budget.Hour, v.Budget.Day
	if !bh.Enabled || !bh.Exhausted || bh.Used != 60 || bh.Limit != 60 || bh.ResetsIn <= 0 {
		t.Errorf("budget.hour: got %+v, want 60 of 60, exhausted, resetting", bh)
	}
	if !bd.Enabled || bd.Exhausted || bd.Used != 60 || bd.Limit != 500 {
		t.Errorf("budget.day: got %+v, want 60 of 500, not exhausted", bd)
	}
	for _, w := range []struct {
		name string
		tot  abuseTally
	}{{"last_hour", v.LastHour.Total}, {"last_day", v.LastDay.Total}} {
		if w.tot.Sends != 60 || w.tot.Refusals != 20 || w.tot.Verifications != 10 {
			t.Errorf("%s total: got %d sent, %d refused, %d verified; want 60, 20, 10", w.name, w.tot.Sends, w.tot.Refusals, w.tot.Verifications)
		}
		if got := w.tot.RefusalsByCode; got["country_rate_limited"] != 10 || got["budget_exhausted"] != 10 {
			t.Errorf("%s refusals by code: got %v, want 10 country_rate_limited, 10 budget_exhausted", w.name, got)
		}
	}
	type row struct {
		sends, refusals, verified int64
		rate                      float64
		limit                     int64 // per_country, 0: none
	}
	want := map[string]row{
		"NG": {20, 5, 0, 0, 20}, "PK": {15, 5, 0, 0, 15}, "ZA": {6, 10, 0, 0, 0},
		"GB": {10, 0, 10, 1, 0}, "ID": {9, 0, 0, 0, 0},
	}
	var order []string
	for _, c := range v.LastHour.Countries {
		order = append(order, c.Country)
		w, ok := want[c.Country]
		if !ok {
			t.Errorf("country %s: not in the attack", c.Country)
			continue
		}
		got := row{sends: c.Sends, refusals: c.Refusals, verified: c.Verifications}
		if c.ConversionRate != nil {
			got.rate = *c.ConversionRate
		}
		for _, l := range c.Limits {
			if l.Rule == "per_country" {
				got.limit = l.Limit
			}
		}
		if got != w {
			t.Errorf("country %s: got %+v, want %+v", c.Country, got, w)
		}
	}
	// Busiest first (sends + refusals); ties by name.
	if wantOrder := []string{"NG", "PK", "ZA", "GB", "ID"}; !slices.Equal(order, wantOrder) {
		t.Errorf("countries: got %v, want %v", order, wantOrder)
	}
	if c := v.LastHour.Countries[0]; c.CallingCode != "+234" || c.RefusalsByCode["country_rate_limited"] != 5 {
		t.Errorf("NG row: got calling code %q, refusals %v", c.CallingCode, c.RefusalsByCode)
	}
	// The prefixes: the coarsest of PK's and NG's ranges lead, with the
	// limit of their depth and their country.
	if len(v.LastHour.Prefixes) == 0 {
		t.Fatal("no prefixes")
	}
	if p := v.LastHour.Prefixes[0]; p.Country == "" || p.Limit == nil || p.Limit.Limit == 0 {
		t.Errorf("top prefix %+v: want its country and limit", p)
	}
	// Alerts: the Indonesian range at three depths (blocked) and the
	// country (reported: the velocity rule, which would quarantine it, is off).
	var alerts []string
	for _, a := range v.Alerts {
		alerts = append(alerts, a.Scope+" "+a.Subject+" "+a.Outcome)
		if a.SecondsLeft <= 0 || a.Rule != "conversion" || a.Country != "ID" {
			t.Errorf("alert %+v: want a live conversion alert of ID", a)
		}
	}
	slices.Sort(alerts)
	wantAlerts := []string{"country ID reported", "prefix +628123 blocked", "prefix +6281234 blocked", "prefix +628123456 blocked"}
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts: got %v, want %v", alerts, wantAlerts)
	}
	if len(v.AutoBlocks) != 3 {
		t.Errorf("auto blocks: got %d, want 3", len(v.AutoBlocks))
	}
	for _, b := range v.AutoBlocks {
		if b.Author != guard.ConversionActor || b.SecondsLeft == nil || *b.SecondsLeft != 3600 {
			t.Errorf("auto block %+v: want the watch's, an hour left", b)
		}
	}
	// The blocked list holds the three deny-list entries (the budget and
	// the country limits block no number).
	if v.Blocks.Total != 3 || len(v.Blocks.First) != 3 {
		t.Errorf("blocks: got total %d, %d listed; want 3", v.Blocks.Total, len(v.Blocks.First))
	}
}
