package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

const (
	shopSID = "VA0123456789abcdef0123456789abcdef"
	bankSID = "VAfedcba9876543210fedcba9876543210"
	goneSID = "VA00000000000000000000000000000000"
)

// TestAbuseRecorderCountsServices: with services in the policy file, each
// send, refusal (and its code) and verification counts under its
// service's SID, the default service's under "~default"; without, no
// service field is counted at all.
func TestAbuseRecorderCountsServices(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	events := []guard.Event{
		{Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent, Service: shopSID, Trusted: true},
		{Action: guard.ActionOTPSend, Outcome: "cooldown", Service: shopSID},
		{Action: guard.ActionOTPVerify, Outcome: guard.OutcomeValid, Service: shopSID},
		{Action: guard.ActionOTPVerify, Outcome: "wrong_code", Service: shopSID}, // not counted anywhere
		{Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent},                // the default service
		{Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent, Service: "not-a-sid|NG"},
		{Action: guard.ActionRiskLookup, Outcome: "high", Service: bankSID}, // countries only
	}
	for _, tc := range []struct {
		name     string
		services []guard.Service
		want     map[string]int64
	}{
		{"with services", []guard.Service{{SID: shopSID}, {SID: bankSID, Default: true}}, map[string]int64{
			"s " + shopSID + "|NG|s": 1, "s " + shopSID + "|NG|r": 1, "s " + shopSID + "|NG|r:cooldown": 1, "s " + shopSID + "|NG|v": 1,
			"s ~default|NG|s": 1,
		}},
		{"without", nil, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeAbuseCounters{counts: map[string]int64{}}
			r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return guard.DefaultPolicies().OTP },
				Services: func() []guard.Service { return tc.services }, Now: func() time.Time { return now }})
			for _, e := range events {
				e.At, e.Phone, e.Country = now, "+2348031234567", "NG"
				r.Record(e)
			}
			if err := r.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for k, n := range st.counts {
				if k[0] == 's' {
					got[k] = n
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("service counts (-want +got):\n%s", d)
			}
			if st.counts["c NG|s"] != 3 || st.counts["c NG|t"] != 1 {
				t.Errorf("countries: %v; want every service's sends", st.counts)
			}
		})
	}
}

// TestAbuseViewServices: a window's service rows are the default service
// (named as the service marked default), then the file's other services
// in its order, with or without traffic, then a service the file no
// longer names; each with its busiest countries first, at most top.
func TestAbuseViewServices(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	st := &readAbuseData{data: ops.AbuseData{Hours: make([]ops.AbuseHour, 25)}}
	for i := range st.data.Hours {
		st.data.Hours[i].Hour = h - int64(i)
	}
	st.data.Hours[0].Services = map[string]int64{
		shopSID + "|NG|s": 40, shopSID + "|NG|r": 60, shopSID + "|NG|r:unusual_volume": 60, shopSID + "|NG|v": 2,
		shopSID + "|GB|s": 5, shopSID + "|GB|v": 5, shopSID + "|KE|s": 1, shopSID + "|~other|s": 3,
		"~default|GB|s": 7, goneSID + "|FR|s": 1,
		"bad field": 9,
	}
	st.data.Hours[5].Services = map[string]int64{shopSID + "|GB|s": 100, "~default|GB|v": 6} // the day's only
	pol := guard.DefaultPolicies().OTP
	pol.CountryVelocity.Mode = guard.VelocityOff
	services := []guard.Service{{SID: shopSID, FriendlyName: "Shop"}, {SID: bankSID, FriendlyName: "Bank", Default: true},
		{SID: "VA11111111111111111111111111111111", FriendlyName: "Quiet"}}
	d := ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: st, Policy: func() guard.OTPPolicy { return pol },
		Services: func() []guard.Service { return services }, Now: func() time.Time { return now }})
	rep, err := d.Read(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	type country struct {
		Country             string
		Sent, Refused, Verf int64
	}
	type row struct {
		Service, Name string
		Sent, Verf    int64
		Countries     []country
		Total         int
	}
	rows := func(w ops.AbuseWindow) []row {
		var out []row
		for _, s := range w.Services {
			r := row{Service: s.Service, Name: s.FriendlyName, Sent: s.Sends, Verf: s.Verifications, Total: s.CountriesTotal}
			for _, c := range s.Countries {
				r.Countries = append(r.Countries, country{c.Country, c.Sends, c.Refusals, c.Verifications})
			}
			out = append(out, r)
		}
		return out
	}
	hour := []row{
		{Name: "Bank", Sent: 7, Countries: []country{{"GB", 7, 0, 0}}, Total: 1},
		{Service: shopSID, Name: "Shop", Sent: 49, Verf: 7, Countries: []country{{"NG", 40, 60, 2}, {"GB", 5, 0, 5}}, Total: 4},
		{Service: "VA11111111111111111111111111111111", Name: "Quiet", Total: 0},
		{Service: goneSID, Sent: 1, Countries: []country{{"FR", 1, 0, 0}}, Total: 1},
	}
	if diff := cmp.Diff(hour, rows(rep.Windows[0])); diff != "" {
		t.Errorf("last hour (-want +got):\n%s", diff)
	}
	day := rows(rep.Windows[1])
	if len(day) != 4 || day[0].Verf != 6 || day[1].Sent != 149 || day[1].Countries[0] != (country{"GB", 105, 0, 5}) {
		t.Errorf("last day: %+v; want the day's hours summed (Shop's GB 105 sent, first)", day)
	}
	if got := rep.Windows[0].Services[1].ByCode["unusual_volume"]; got != 60 {
		t.Errorf("Shop's refusals by code: %d unusual_volume, want 60", got)
	}

	// No services in the file: no rows, whatever the store holds.
	services = nil
	rep, err = d.Read(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if s := rep.Windows[0].Services; s != nil {
		t.Errorf("without services: rows %+v, want none", s)
	}
}

// TestAbuseAlertNamesService: a rule's alert names the service whose
// sends it judged (the event's), so two services' alerts on one country
// are two.
func TestAbuseAlertNamesService(t *testing.T) {
	st := &fakeAbuseCounters{counts: map[string]int64{}}
	now := time.Unix(1_780_000_000, 0)
	r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return guard.DefaultPolicies().OTP },
		Now: func() time.Time { return now }})
	for _, service := range []string{guard.DefaultService, shopSID} {
		r.Record(guard.Event{At: now, Action: guard.ActionVelocity, Outcome: "unusual_volume", Country: "NG", Service: service,
			Detail: "country=NG over its hourly volume"})
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.alerts) != 2 || st.alerts[0].Service != "" || st.alerts[1].Service != shopSID || st.alerts[1].Subject != "NG" {
		t.Errorf("alerts: %+v, want the default service's and the shop's on NG", st.alerts)
	}
}
