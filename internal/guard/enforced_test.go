package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
)

// TestEnforced: the limits the attack view and the budget gauges show are
// the file's tightened by the overrides in force, and say when an
// override sets them.
func TestEnforced(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	until := now.Add(time.Hour)
	p := guard.DefaultPolicies().OTP
	p.Budget = guard.Budget{PerHour: 50}
	p.PerCountry = map[string]guard.Window{"GB": {Limit: 40, Window: 2 * time.Hour}, "*": {Limit: 30, Window: time.Hour}}
	over := fakeOverrides{
		{Kind: guard.OverrideBudgetHour, Limit: 2, ExpiresAt: until},
		{Kind: guard.OverrideBudgetDay, Limit: 7, ExpiresAt: until}, // the file has no daily budget
		{Kind: guard.OverrideCountryLimit, Subject: "GB", Limit: 5, ExpiresAt: until},
		{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 30, ExpiresAt: until}, // a tie with the wildcard
		{Kind: guard.OverrideCountryLimit, Subject: "PK", Limit: 9, ExpiresAt: now},    // expired
		{Kind: guard.OverridePrefixLimit, Subject: "+2348031", Limit: 3, ExpiresAt: until},
	}
	e := guard.EnforcedAt(p, over, now)
	type country struct {
		guard.InForce
		Key string
	}
	countryOf := func(region string) country {
		l, key := e.Country(region)
		return country{l, key}
	}
	got := map[string]any{
		"budget hour": e.Budget("hour"), "budget day": e.Budget("day"),
		"GB": countryOf("GB"), "NG": countryOf("NG"), "PK": countryOf("PK"),
		"prefix +2348031":  e.Prefix("+2348031", guard.PrefixWindow{Limit: 100, Window: time.Hour}),
		"prefix +2348032":  e.Prefix("+2348032", guard.PrefixWindow{Limit: 100, Window: time.Hour}),
		"prefix depth off": e.Prefix("+2348031", guard.PrefixWindow{}),
	}
	want := map[string]any{
		"budget hour":      guard.InForce{Limit: 2, Window: time.Hour, Override: true},
		"budget day":       guard.InForce{Limit: 7, Window: 24 * time.Hour, Override: true},
		"GB":               country{guard.InForce{Limit: 5, Window: 2 * time.Hour, Override: true}, "GB"},
		"NG":               country{guard.InForce{Limit: 30, Window: time.Hour, Override: true}, "*"},
		"PK":               country{guard.InForce{Limit: 30, Window: time.Hour}, "*"},
		"prefix +2348031":  guard.InForce{Limit: 3, Window: time.Hour, Override: true},
		"prefix +2348032":  guard.InForce{Limit: 100, Window: time.Hour},
		"prefix depth off": guard.InForce{},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("enforced limits (-want +got):\n%s", d)
	}

	// Without overrides: the file's, and no country limit where it has none.
	bare := guard.EnforcedAt(guard.DefaultPolicies().OTP, nil, now)
	if l := bare.Budget("hour"); l != (guard.InForce{}) {
		t.Errorf("budget of the defaults: %+v, want off", l)
	}
	if l, key := bare.Country("GB"); l != (guard.InForce{}) || key != "" {
		t.Errorf("country limit of the defaults: %+v %q, want none", l, key)
	}
	// A country limited by an override alone, over its default window.
	only := guard.EnforcedAt(guard.DefaultPolicies().OTP, fakeOverrides{{Kind: guard.OverrideCountryLimit, Subject: "001", Limit: 4, ExpiresAt: until}}, now)
	if l, key := only.Country(""); l != (guard.InForce{Limit: 4, Window: guard.DefaultOverrideWindow, Override: true}) || key != "" {
		t.Errorf("non-geographic numbers under an override alone: %+v %q", l, key)
	}
}

// TestBudgetUseWithOverrides: the budget gauges read the limits a send
// meets: an override's below the file's, and a window only an override
// turns on.
func TestBudgetUseWithOverrides(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	p := guard.DefaultPolicies()
	p.OTP.Budget.PerHour = 50
	p.FillDefaults()
	st := guardtest.NewOutageStore()
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
		Now: func() time.Time { return now }, Overrides: fakeOverrides{
			{Kind: guard.OverrideBudgetHour, Limit: 2, ExpiresAt: now.Add(time.Hour)},
			{Kind: guard.OverrideBudgetDay, Limit: 9, ExpiresAt: now.Add(time.Hour)},
		}})
	uses, err := otp.BudgetUse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range uses {
		uses[i].ResetAfter = 0
	}
	want := []guard.BudgetUse{
		{Window: "hour", Limit: 2, Override: true, Known: true},
		{Window: "day", Limit: 9, Override: true, Known: true},
	}
	if d := cmp.Diff(want, uses); d != "" {
		t.Errorf("BudgetUse (-want +got):\n%s", d)
	}
}
