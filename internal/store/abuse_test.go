package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestAbuseCountersBounded: the attack view's hashes take no new subject
// past their cap (the count goes to ~other), keep counting the subjects
// they hold, and a read of a day costs one round trip.
func TestAbuseCountersBounded(t *testing.T) {
	s, rt, _ := redistest.Store(t)
	ctx := context.Background()
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	prefixes := map[string]int64{}
	for i := range 2000 { // 2000 prefixes x 1 kind, over the 900-field cap
		prefixes[fmt.Sprintf("+2348%06d|NG|0|s", i)] = 1
	}
	countries := map[string]int64{"NG|s": 2000, "NG|r": 7, "NG|r:budget_exhausted": 7}
	alerts := []ops.AbuseAlert{{Rule: "conversion", Scope: "prefix", Subject: "+23480", Country: "NG", Outcome: "blocked",
		At: now, Until: now.Add(time.Hour), Detail: "prefix=+23480 ..."}}
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Countries: countries, Prefixes: prefixes}}, alerts, now); err != nil {
		t.Fatal(err)
	}
	// A subject already held keeps counting after the cap is reached.
	var held string
	rt.Reset()
	d, err := s.AbuseCounters.ReadAbuse(ctx, []int64{h, h - 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.N(); n != 1 {
		t.Errorf("read: %d round trips, want 1", n)
	}
	p := d.Hours[0].Prefixes
	if len(p) > ops.MaxPrefixFields+1 {
		t.Errorf("prefix hash: %d fields, want at most %d and ~other", len(p), ops.MaxPrefixFields)
	}
	var total int64
	for f, n := range p {
		total += n
		if f != ops.OtherField+"|s" {
			held = f
		}
	}
	if total != 2000 || p[ops.OtherField+"|s"] != 2000-ops.MaxPrefixFields {
		t.Errorf("prefix counts: total %d, ~other %d; want 2000, %d", total, p[ops.OtherField+"|s"], 2000-ops.MaxPrefixFields)
	}
	if got := d.Hours[0].Countries; got["NG|s"] != 2000 || got["NG|r:budget_exhausted"] != 7 {
		t.Errorf("countries: %v", got)
	}
	if len(d.Alerts) != 1 || d.Alerts[0].Subject != "+23480" || !d.Alerts[0].Until.Equal(now.Add(time.Hour)) {
		t.Errorf("alerts: %+v", d.Alerts)
	}
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Prefixes: map[string]int64{held: 5}}}, nil, now); err != nil {
		t.Fatal(err)
	}
	d, err = s.AbuseCounters.ReadAbuse(ctx, []int64{h})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Hours[0].Prefixes[held]; got != 6 {
		t.Errorf("held subject after the cap: %d, want 6", got)
	}
}

// TestAbuseCarriersBoundedPerCountry: the carriers' hash takes no new
// carrier past its cap; a country's new carriers then count under that
// country's "other" carrier, not another country's, and a carrier it
// holds keeps counting. Real Redis: the cap is the script's.
func TestAbuseCarriersBoundedPerCountry(t *testing.T) {
	s, _, _ := redistest.Store(t)
	ctx := context.Background()
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	fill := map[string]int64{}
	for i := range ops.MaxCarrierFields { // the cap, by carriers of GH
		fill[fmt.Sprintf("GH|c%d|C%d|s", i, i)] = 1
	}
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Carriers: fill}}, nil, now); err != nil {
		t.Fatal(err)
	}
	more := map[string]int64{"NG|mtn|MTN|s": 4, "NG|mtn|MTN|r:challenge_required": 2, "NG|glo|Glo|s": 3, "GH|c7|C7|s": 5}
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Carriers: more}}, nil, now); err != nil {
		t.Fatal(err)
	}
	d, err := s.AbuseCounters.ReadAbuse(ctx, []int64{h})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Hours[0].Carriers
	for f, want := range map[string]int64{"NG|~other|other|s": 7, "NG|~other|other|r:challenge_required": 2, "NG|mtn|MTN|s": 0, "GH|c7|C7|s": 6} {
		if got[f] != want {
			t.Errorf("carriers[%q] = %d, want %d", f, got[f], want)
		}
	}
	if len(got) != ops.MaxCarrierFields+2 {
		t.Errorf("carrier hash: %d fields, want the cap %d and NG's two others", len(got), ops.MaxCarrierFields)
	}
}

// TestAbuseServicesBoundedPerService: the services' hash takes no new
// field past its cap; a service's new countries then count under that
// service's "~other" country, not another service's, and a field it holds
// keeps counting. Real Redis: the cap is the script's.
func TestAbuseServicesBoundedPerService(t *testing.T) {
	s, rt, _ := redistest.Store(t)
	ctx := context.Background()
	now := time.Unix(1_780_000_000, 0)
	h := now.Unix() / 3600
	const shop, bank = "VA0123456789abcdef0123456789abcdef", "VAfedcba9876543210fedcba9876543210"
	fill := map[string]int64{}
	for i := range ops.MaxServiceFields { // the cap, by codes of the shop's NG refusals
		fill[fmt.Sprintf("%s|NG|r:c%d", shop, i)] = 1
	}
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Services: fill}}, nil, now); err != nil {
		t.Fatal(err)
	}
	more := map[string]int64{bank + "|GB|s": 4, bank + "|GB|r:cooldown": 2, "~default|KE|v": 3, shop + "|NG|r:c7": 5}
	rt.Reset()
	if err := s.AbuseCounters.AddAbuse(ctx, []ops.AbuseCounts{{Hour: h, Services: more, Countries: map[string]int64{"GB|s": 4}}}, nil, now); err != nil {
		t.Fatal(err)
	}
	if n := rt.N(); n != 1 {
		t.Errorf("add: %d round trips, want 1 (the services in the same script)", n)
	}
	d, err := s.AbuseCounters.ReadAbuse(ctx, []int64{h})
	if err != nil {
		t.Fatal(err)
	}
	got := d.Hours[0].Services
	for f, want := range map[string]int64{bank + "|~other|s": 4, bank + "|~other|r:cooldown": 2, "~default|~other|v": 3,
		bank + "|GB|s": 0, shop + "|NG|r:c7": 6} {
		if got[f] != want {
			t.Errorf("services[%q] = %d, want %d", f, got[f], want)
		}
	}
	if len(got) != ops.MaxServiceFields+3 {
		t.Errorf("services hash: %d fields, want the cap %d and three others", len(got), ops.MaxServiceFields)
	}
	if d.Hours[0].Countries["GB|s"] != 4 {
		t.Errorf("countries: %v", d.Hours[0].Countries)
	}
}

// TestAbuseAlertsPerService: two services' alerts of one rule on one
// subject are two alerts, each naming its service; the default service's
// keeps the field it had before services.
func TestAbuseAlertsPerService(t *testing.T) {
	tg := redistest.New(t)
	s, _, rdb := redistest.StoreAt(t, tg)
	ctx := context.Background()
	now := time.Unix(1_780_000_000, 0)
	const shop = "VA0123456789abcdef0123456789abcdef"
	alert := func(service, outcome string) ops.AbuseAlert {
		return ops.AbuseAlert{Rule: "velocity", Scope: "country", Subject: "NG", Country: "NG", Service: service, Outcome: outcome,
			At: now, Until: now.Add(time.Hour), Detail: "country=NG ..."}
	}
	alerts := []ops.AbuseAlert{alert("", "unusual_volume"), alert(shop, "unusual_volume")}
	if err := s.AbuseCounters.AddAbuse(ctx, nil, alerts, now); err != nil {
		t.Fatal(err)
	}
	d, err := s.AbuseCounters.ReadAbuse(ctx, []int64{now.Unix() / 3600})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, a := range d.Alerts {
		got[a.Service] = a.Subject == "NG"
	}
	if len(d.Alerts) != 2 || !got[""] || !got[shop] {
		t.Errorf("alerts: %+v, want the default service's and the shop's on NG", d.Alerts)
	}
	fields, err := rdb.HKeys(ctx, tg.Prefix+"ops:abuse:{abuse}:alerts").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	if want := []string{"velocity|country|NG", "velocity|country|NG|" + shop}; !slices.Equal(fields, want) {
		t.Errorf("alert fields %v, want %v", fields, want)
	}
}
