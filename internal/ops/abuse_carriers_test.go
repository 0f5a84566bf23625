package ops_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// fixedOverrides is a fixed set of overrides in force (guard.Overrides).
type fixedOverrides []guard.Override

func (f fixedOverrides) ActiveOverrides() []guard.Override { return f }

// readAbuseData is an AbuseCounters whose reads answer data.
type readAbuseData struct {
	fakeAbuseCounters
	data ops.AbuseData
}

func (r *readAbuseData) ReadAbuse(context.Context, []int64) (ops.AbuseData, error) {
	return r.data, nil
}

func TestAbuseRecorderCountsChallengesByCarrier(t *testing.T) {
	st := &fakeAbuseCounters{counts: map[string]int64{}}
	now := time.Unix(1_780_000_000, 0)
	r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return guard.DefaultPolicies().OTP },
		Now: func() time.Time { return now }})
	for _, e := range []guard.Event{
		{Outcome: ops.CodeChallengeRequired, Phone: "+2348051234567", Country: "NG"},
		{Outcome: guard.OutcomeSent, Phone: "+2348051234567", Country: "NG", Trusted: true},
		{Outcome: guard.OutcomeSent, Phone: "+80012345678"}, // non-geographic, no carrier
	} {
		e.At, e.Action = now, guard.ActionOTPSend
		r.Record(e)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got = map[string]int64{}
	for k, n := range st.counts {
		if k[0] == 'k' {
			got[k] = n
		}
	}
	want := map[string]int64{"k NG|glo|Glo|r": 1, "k NG|glo|Glo|r:challenge_required": 1, "k NG|glo|Glo|s": 1, "k 001|unknown|unknown|s": 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("carrier counts (-want +got):\n%s", d)
	}
}

// TestAbuseViewCarriers: a country's carriers are rows under it, busiest
// first, at most ops.MaxCarrierRows and those an override holds, the
// rest one "other" row; each carries its overrides in force.
func TestAbuseViewCarriers(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	carriers := map[string]int64{
		"NG|mtn|MTN|s": 50, "NG|mtn|MTN|r": 30, "NG|mtn|MTN|r:challenge_required": 20, "NG|mtn|MTN|v": 1,
		"NG|airtel|Airtel|s": 40, "NG|airtel|Airtel|v": 30,
		"NG|~other|other|s": 1, // the store's own "other"
		"GH|mtn|MTN|s":      2,
	}
	for i := range 6 { // more small carriers than rows: the quietest go to "other"
		carriers[fmt.Sprintf("NG|c%d|C%d|s", i, i)] = int64(10 - i)
	}
	carriers["NG|quiet|Quiet|s"] = 1 // held by an override: kept however quiet
	st := &readAbuseData{data: ops.AbuseData{Hours: make([]ops.AbuseHour, 25)}}
	for i := range st.data.Hours {
		st.data.Hours[i].Hour = h - int64(i)
	}
	st.data.Hours[0].Countries = map[string]int64{"NG|s": 200, "GH|s": 2}
	st.data.Hours[0].Carriers = carriers
	overrides := fixedOverrides{
		{Kind: guard.OverrideCarrierLimit, Subject: "NG/mtn", Limit: 40, ExpiresAt: now.Add(time.Hour)},
		{Kind: guard.OverrideCarrierPause, Subject: "NG/quiet", ExpiresAt: now.Add(30 * time.Minute)},
		{Kind: guard.OverrideCarrierPause, Subject: "GH/glo", ExpiresAt: now.Add(time.Hour)}, // no traffic: no row
	}
	pol := guard.DefaultPolicies().OTP
	pol.CountryVelocity.Mode = guard.VelocityOff
	d := ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: st, Policy: func() guard.OTPPolicy { return pol },
		Overrides: overrides, Now: func() time.Time { return now }})
	rep, err := d.Read(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name                string
		Sends, Refused, Chl int64
		Limit               int64
		Paused              bool
	}
	rows := map[string][]row{}
	for _, c := range rep.Windows[0].Countries {
		for _, k := range c.Carriers {
			r := row{Name: k.SubjectName(c.Country), Sends: k.Sends, Refused: k.Refusals, Chl: k.Challenged(), Paused: !k.PausedUntil.IsZero()}
			for _, l := range k.Limits {
				if l.Rule == "carrier_limit" && l.Override && l.Window == time.Hour {
					r.Limit = l.Limit
				}
			}
			rows[c.Country] = append(rows[c.Country], r)
		}
	}
	want := map[string][]row{
		"NG": {
			{Name: "NG / MTN", Sends: 50, Refused: 30, Chl: 20, Limit: 40},
			{Name: "NG / Airtel", Sends: 40},
			{Name: "NG / C0", Sends: 10},
			{Name: "NG / C1", Sends: 9},
			{Name: "NG / C2", Sends: 8},
			{Name: "NG / Quiet", Sends: 1, Paused: true},
			{Name: "NG / other", Sends: 7 + 6 + 5 + 1}, // C3, C4, C5 and the store's
		},
		"GH": {{Name: "GH / MTN", Sends: 2}},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("carrier rows (-want +got):\n%s", diff)
	}
}

// TestCarrierAlertNamed: a rule's alert on a carrier ("carrier=NG/mtn" at
// the head of its detail) is shown as "NG / MTN".
func TestCarrierAlertNamed(t *testing.T) {
	st := &fakeAbuseCounters{counts: map[string]int64{}}
	now := time.Unix(1_780_000_000, 0)
	r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return guard.DefaultPolicies().OTP },
		Now: func() time.Time { return now }})
	r.Record(guard.Event{At: now, Action: guard.ActionVelocity, Outcome: "unusual_volume", Country: "NG",
		Detail: "carrier=NG/mtn 412 sends this hour, over 120"})
	r.Record(guard.Event{At: now, Action: guard.ActionVelocity, Outcome: "unusual_volume", Country: "NG",
		Detail: "operator=NG/mtn not a scope the view knows"})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.alerts) != 1 || st.alerts[0].Scope != "carrier" || st.alerts[0].Subject != "NG / MTN" || st.alerts[0].Country != "NG" {
		t.Errorf("alerts %+v, want one of scope carrier, subject NG / MTN, country NG", st.alerts)
	}
}

// TestAbuseViewCountryPaused: a country_pause in force is in the row of
// the country it refuses (a pause of GB in Jersey's too, as a send meets
// it), with when it ends; a country nobody paused has none.
func TestAbuseViewCountryPaused(t *testing.T) {
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	st := &readAbuseData{data: ops.AbuseData{Hours: make([]ops.AbuseHour, 25)}}
	for i := range st.data.Hours {
		st.data.Hours[i].Hour = h - int64(i)
	}
	st.data.Hours[0].Countries = map[string]int64{"NG|s": 70, "JE|s": 3, "GH|s": 2, "~other|s": 1}
	ngUntil, gbUntil := now.Add(30*time.Minute), now.Add(2*time.Hour)
	overrides := fixedOverrides{
		{Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: ngUntil},
		{Kind: guard.OverrideCountryPause, Subject: "GB", ExpiresAt: gbUntil},
		{Kind: guard.OverrideCountryPause, Subject: "GH", ExpiresAt: now.Add(-time.Minute)}, // ended
	}
	pol := guard.DefaultPolicies().OTP
	pol.CountryVelocity.Mode = guard.VelocityOff
	d := ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: st, Policy: func() guard.OTPPolicy { return pol },
		Overrides: overrides, Now: func() time.Time { return now }})
	rep, err := d.Read(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Time{}
	for _, c := range rep.Windows[0].Countries {
		got[c.Country] = c.PausedUntil
	}
	want := map[string]time.Time{"NG": ngUntil, "JE": gbUntil, "GH": {}, ops.OtherField: {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paused until, by country row (-want +got):\n%s", diff)
	}
}
