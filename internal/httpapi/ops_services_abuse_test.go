package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// serviceRow is a service of the attack view as the test compares it:
// its totals and its countries' (sent, refused, verified).
type serviceRow struct {
	Service, Name string
	Default       bool
	Total         [3]int64
	Countries     map[string][3]int64
}

// serviceRows reads the service rows of an attack view's window.
func serviceRows(w client.AbuseWindow) []serviceRow {
	var out []serviceRow
	for _, s := range w.Services {
		r := serviceRow{Service: s.Service, Name: s.FriendlyName, Default: s.Default,
			Total: [3]int64{s.Sends, s.Refusals, s.Verifications}, Countries: map[string][3]int64{}}
		for _, c := range s.Countries {
			r.Countries[c.Country] = [3]int64{c.Sends, c.Refusals, c.Verifications}
		}
		out = append(out, r)
	}
	return out
}

// TestAbuseViewServices: two Verify services and the default service
// send to two countries; GET /ops/abuse gives each service its own rows,
// the default service first, then the file's services in its order, in
// both windows, with the refusals by code and the conversion; the
// decisions' metrics carry the same services in their service label.
func TestAbuseViewServices(t *testing.T) {
	oc := servicesCluster(t, sqlstore.EngineSQLite, deskShop, deskBank)
	serviceSend(t, oc, deskShop, "+2348031230001", true)
	serviceSend(t, oc, deskShop, "+2348031230002", false)
	serviceSend(t, oc, deskShop, "+447400900301", true)
	// A second send to the same number at once meets its cooldown.
	if got := verifyCall(t, oc, deskShop, "Verifications", url.Values{"To": {"+2348031230002"}, "Channel": {"sms"}}); got != http.StatusTooManyRequests {
		t.Fatalf("Shop's second send to a number: %d, want 429", got)
	}
	serviceSend(t, oc, deskBank, "+447400900311", true)
	if status, _ := oc.send(t, 0, "+447400900321"); status != http.StatusOK { // the default service's
		t.Fatalf("send: %d", status)
	}
	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil {
		t.Fatal(err)
	}

	r := oc.ops(t, 0, "GET", "/ops/abuse", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/abuse: %d %s", r.Status, r.Body)
	}
	var v client.AbuseView
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatal(err)
	}
	want := []serviceRow{
		{Service: "default", Default: true, Total: [3]int64{1, 0, 0}, Countries: map[string][3]int64{"GB": {1, 0, 0}}},
		{Service: deskShop.sid, Name: "Shop", Total: [3]int64{3, 1, 2}, Countries: map[string][3]int64{"NG": {2, 1, 1}, "GB": {1, 0, 1}}},
		{Service: deskBank.sid, Name: "Bank", Total: [3]int64{1, 0, 1}, Countries: map[string][3]int64{"GB": {1, 0, 1}}},
	}
	for name, w := range map[string]client.AbuseWindow{"last_hour": v.LastHour, "last_day": v.LastDay} {
		if diff := cmp.Diff(want, serviceRows(w)); diff != "" {
			t.Errorf("%s: services (-want +got):\n%s", name, diff)
		}
	}
	if len(v.LastHour.Services) == 3 {
		shop := v.LastHour.Services[1]
		if shop.RefusalsByCode["cooldown"] != 1 || shop.ConversionRate == nil || *shop.ConversionRate < 0.66 || *shop.ConversionRate > 0.67 {
			t.Errorf("Shop: refusals by code %v, conversion %v; want 1 cooldown, 2/3", shop.RefusalsByCode, shop.ConversionRate)
		}
		if ng := shop.Countries[0]; ng.Country != "NG" || shop.CountriesTotal != 2 {
			t.Errorf("Shop's countries: %+v (total %d), want NG first (busiest) of 2", shop.Countries, shop.CountriesTotal)
		}
	}
	// The decisions' metrics tell the services apart the same way.
	res, err := http.Get(oc.instances[0].srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`otpguard_decisions_total{outcome="allowed",policy="otp_send",service="` + deskShop.sid + `"} 3`,
		`otpguard_decisions_total{outcome="cooldown",policy="otp_send",service="` + deskShop.sid + `"} 1`,
		`otpguard_decisions_total{outcome="allowed",policy="otp_verify",service="` + deskShop.sid + `"} 2`,
		`otpguard_decisions_total{outcome="allowed",policy="otp_send",service="` + deskBank.sid + `"} 1`,
		`otpguard_decisions_total{outcome="allowed",policy="otp_send",service="default"} 1`,
		`otpguard_decisions_total{outcome="allowed",policy="otp_verify",service="default"} 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The countries' rows still count every service together.
	if got := v.LastHour.Total; got.Sends != 5 || got.Refusals != 1 || got.Verifications != 3 {
		t.Errorf("total: %+v, want 5 sent, 1 refused, 3 verified", got)
	}
}

// TestAbuseViewWithoutServices: a deployment that names no service has no
// service rows in the attack view: the member is absent.
func TestAbuseViewWithoutServices(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	if status, _ := oc.send(t, 0, "+447400900331"); status != http.StatusOK {
		t.Fatalf("send: %d", status)
	}
	if err := oc.instances[0].app.FlushAbuse(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := oc.ops(t, 0, "GET", "/ops/abuse", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /ops/abuse: %d %s", r.Status, r.Body)
	}
	var got struct {
		LastHour map[string]json.RawMessage `json:"last_hour"`
		LastDay  map[string]json.RawMessage `json:"last_day"`
	}
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.LastHour["total"]) == "" {
		t.Fatalf("last_hour has no total: %s", r.Body)
	}
	for name, w := range map[string]map[string]json.RawMessage{"last_hour": got.LastHour, "last_day": got.LastDay} {
		if s, ok := w["services"]; ok {
			t.Errorf("%s: services %s, want none without services in the policy file", name, s)
		}
	}
}
