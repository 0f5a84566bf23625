package httpapi_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// carrierRow is one carrier of GET /ops/abuse's countries.
type carrierRow struct {
	Carrier, Name   string
	SubjectName     string `json:"subject_name"`
	Sends, Refusals int64
	Limits          []viewLimit
	Paused          bool
	PausedLeft      *int64 `json:"paused_seconds_left"`
}

// TestAbuseViewCarriers: sends to three of Nigeria's carriers, one held by
// a carrier_limit and one paused, show in GET /ops/abuse as the country's
// carriers, each with its counts and the override in force on it, and on
// the page as rows "NG / MTN" under Nigeria's, marked as overrides. Real
// Redis.
func TestAbuseViewCarriers(t *testing.T) {
	p := defaults()
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite, policies: &p})
	addOverride(t, oc, 0, `{"kind":"carrier_limit","subject":"NG / MTN","limit":2,"reason":"wave on MTN"}`)
	addOverride(t, oc, 0, `{"kind":"carrier_pause","subject":"ng/glo","reason":"wave on Glo"}`)
	for _, s := range []struct{ phone, code string }{
		{"+2348031000001", ""}, {"+2348031000002", ""}, {"+2348031000003", string(problem.CodeCarrierRateLimited)}, // MTN
		{"+2348051000001", string(problem.CodeCarrierPaused)}, {"+2348051000002", string(problem.CodeCarrierPaused)}, // Glo
		{"+2348021000001", ""}, // Airtel
	} {
		if _, code := oc.send(t, 0, s.phone); code != s.code {
			t.Fatalf("send %s: %q, want %q", s.phone, code, s.code)
		}
	}
	if err := oc.instances[0].app.FlushAbuse(t.Context()); err != nil {
		t.Fatal(err)
	}

	r := oc.ops(t, 0, "GET", "/ops/abuse", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/abuse: %d %s", r.Status, r.Body)
	}
	var v struct {
		LastHour struct {
			Countries []struct {
				Country  string
				Carriers []carrierRow
			}
		} `json:"last_hour"`
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	var got []carrierRow
	for _, c := range v.LastHour.Countries {
		if c.Country == "NG" {
			got = c.Carriers
		}
	}
	if len(got) == 3 && got[1].PausedLeft != nil && *got[1].PausedLeft > 0 {
		got[1].PausedLeft = nil // the day the pause has left, less the test's seconds
	}
	want := []carrierRow{
		{Carrier: "mtn", Name: "MTN", SubjectName: "NG / MTN", Sends: 2, Refusals: 1,
			Limits: []viewLimit{{Rule: "carrier_limit", Limit: 2, WindowSeconds: 3600, Override: true}}},
		{Carrier: "glo", Name: "Glo", SubjectName: "NG / Glo", Refusals: 2, Limits: []viewLimit{}, Paused: true},
		{Carrier: "airtel", Name: "Airtel", SubjectName: "NG / Airtel", Sends: 1, Limits: []viewLimit{}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("NG's carriers in GET /ops/abuse (-want +got):\n%s", d)
	}

	page := oc.ops(t, 0, "GET", "/ops", "")
	if page.Status != http.StatusOK {
		t.Fatalf("GET /ops: %d", page.Status)
	}
	table := regexp.MustCompile(`(?s)<table class="stack countries" id="countries-hour">.*?</table>`).Find(page.Body)
	for _, c := range []struct{ carrier, name, has string }{
		{"mtn", "NG / MTN", "2 per 1 h (carrier_limit)"},
		{"glo", "NG / Glo", "paused"},
		{"airtel", "NG / Airtel", "none"},
	} {
		row := regexp.MustCompile(`(?s)<tr class="carrier-row" data-carrier="` + c.carrier + `">.*?</tr>`).Find(table)
		if row == nil {
			t.Errorf("the page has no row for %s under the last hour's countries", c.name)
			continue
		}
		overridden := strings.Contains(string(row), `class="badge warn override"`)
		if !strings.Contains(string(row), c.name) || !strings.Contains(string(row), c.has) || overridden != (c.carrier != "airtel") {
			t.Errorf("%s's row: want %q, %q and an override mark %v:\n%s", c.name, c.name, c.has, c.carrier != "airtel", row)
		}
	}
}

// TestCarrierOverrideForm: the desk's override form offers the carrier
// kinds, takes "NG / MTN" and lists the override as such; a country that
// is none comes back refused, naming the subject.
func TestCarrierOverrideForm(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	page := oc.ops(t, 0, "GET", "/ops", "")
	for _, option := range []string{`<option value="carrier_limit"`, `<option value="carrier_pause"`} {
		if !strings.Contains(string(page.Body), option) {
			t.Errorf("the override form has no %s", option)
		}
	}
	r := oc.formWithID(t, 0, "/ops/actions/override", "kind=carrier_pause&subject=NG+%2F+MTN&reason=wave&expires_in=1h", opsKey, "carrier-form-1")
	if r.Status != http.StatusSeeOther || !strings.Contains(r.Header.Get("Location"), "ov_done=added") {
		t.Fatalf("the form, NG / MTN: %d %s, want 303 to ov_done=added", r.Status, r.Header.Get("Location"))
	}
	list := oc.ops(t, 0, "GET", "/ops/overrides", "").json(t)["overrides"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["subject"] != "NG/mtn" {
		t.Fatalf("overrides after the form: %v, want NG/mtn", list)
	}
	page = oc.ops(t, 0, "GET", "/ops", "")
	row := regexp.MustCompile(`(?s)<tr class="override-row".*?</tr>`).Find(page.Body)
	if !strings.Contains(string(row), "Pause a carrier of a country") || !strings.Contains(string(row), "NG / MTN") {
		t.Errorf("the override's row: want its kind and NG / MTN:\n%s", row)
	}
	r = oc.formWithID(t, 0, "/ops/actions/override", "kind=carrier_limit&subject=XX%2FMTN&limit=5&reason=wave", opsKey, "carrier-form-2")
	if loc := r.Header.Get("Location"); r.Status != http.StatusSeeOther || !strings.Contains(loc, "ov_err=unknown_country") || !strings.Contains(loc, "ov_field=subject") {
		t.Errorf("the form, XX/MTN: %d %s, want 303 back with unknown_country on subject", r.Status, loc)
	}
}
