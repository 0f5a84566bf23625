package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
)

// fakeOverrides is a fixed set of overrides.
type fakeOverrides []guard.Override

func (f fakeOverrides) ActiveOverrides() []guard.Override { return f }

func TestOverridesTightenSends(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	until := now.Add(time.Hour)
	ctx := context.Background()
	policy := func(edit func(*guard.OTPPolicy)) guard.OTPPolicy {
		p := guard.DefaultPolicies()
		p.OTP.Cooldown = 0
		p.OTP.PerPhone.Limit = 100
		p.OTP.CountryVelocity.Mode = guard.VelocityOff
		if edit != nil {
			edit(&p.OTP)
		}
		p.FillDefaults()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		return p.OTP
	}
	cases := []struct {
		name   string
		policy guard.OTPPolicy
		over   []guard.Override
		// allowed is how many sends to distinct NG numbers pass before
		// refusal with code; -1: none refused in 6.
		allowed int
		code    problem.Code
	}{
		{name: "no override", policy: policy(nil), allowed: -1},
		{name: "prefix on a depth's counter", policy: policy(nil), allowed: 2, code: problem.CodePrefixRateLimited,
			over: []guard.Override{{Kind: guard.OverridePrefixLimit, Subject: "+2348031", Limit: 2, ExpiresAt: until}}},
		{name: "prefix of its own", policy: policy(nil), allowed: 1, code: problem.CodePrefixRateLimited,
			over: []guard.Override{{Kind: guard.OverridePrefixLimit, Subject: "+23480312", Limit: 1, ExpiresAt: until}}},
		{name: "prefix of other numbers", policy: policy(nil), allowed: -1,
			over: []guard.Override{{Kind: guard.OverridePrefixLimit, Subject: "+4474", Limit: 1, ExpiresAt: until}}},
		{name: "country without a file limit", policy: policy(nil), allowed: 3, code: problem.CodeCountryRateLimited,
			over: []guard.Override{{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 3, ExpiresAt: until}}},
		{name: "country below the file's wildcard", allowed: 2, code: problem.CodeCountryRateLimited,
			policy: policy(func(p *guard.OTPPolicy) { p.PerCountry = map[string]guard.Window{"*": {Limit: 5, Window: time.Hour}} }),
			over:   []guard.Override{{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 2, ExpiresAt: until}}},
		{name: "the tightest of two", policy: policy(nil), allowed: 1, code: problem.CodeCountryRateLimited,
			over: []guard.Override{{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 4, ExpiresAt: until},
				{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 1, ExpiresAt: until}}},
		{name: "budget the file turns off", policy: policy(nil), allowed: 2, code: problem.CodeBudgetExhausted,
			over: []guard.Override{{Kind: guard.OverrideBudgetDay, Limit: 2, ExpiresAt: until}}},
		{name: "budget below the file's", allowed: 1, code: problem.CodeBudgetExhausted,
			policy: policy(func(p *guard.OTPPolicy) { p.Budget.PerHour = 4 }),
			over:   []guard.Override{{Kind: guard.OverrideBudgetHour, Limit: 1, ExpiresAt: until}}},
		{name: "pause", policy: policy(nil), allowed: 0, code: problem.CodeCountryPaused,
			over: []guard.Override{{Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: until}}},
		{name: "pause of another country", policy: policy(nil), allowed: -1,
			over: []guard.Override{{Kind: guard.OverrideCountryPause, Subject: "GH", ExpiresAt: until}}},
		{name: "expired", policy: policy(nil), allowed: -1,
			over: []guard.Override{{Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: now},
				{Kind: guard.OverrideBudgetHour, Limit: 1, ExpiresAt: now.Add(-time.Minute)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: tc.policy, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
				Now: func() time.Time { return now }, Overrides: fakeOverrides(tc.over)})
			for i := range 6 {
				_, err := otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+23480312345%02d", i)})
				if i == tc.allowed {
					wantCode(t, err, tc.code)
					var e *problem.Error
					if tc.code == problem.CodeCountryPaused && (!errors.As(err, &e) || e.RetryAfter != time.Hour) {
						t.Errorf("pause: RetryAfter %v, want the hour it has left", e)
					}
					return
				}
				if err != nil {
					t.Fatalf("send %d: %v, want sent", i+1, err)
				}
			}
			if tc.allowed >= 0 {
				t.Errorf("6 sends passed, want a refusal after %d", tc.allowed)
			}
		})
	}
}

func TestCheckTightens(t *testing.T) {
	p := guard.DefaultPolicies().OTP
	p.PerCountry = map[string]guard.Window{"NG": {Limit: 10, Window: time.Hour}, "*": {Limit: 100, Window: time.Hour}}
	p.Budget.PerHour = 50
	p.PerPrefix = guard.PrefixWindow{Limit: 20, Window: time.Hour, DigitsDropped: 3}
	p.PrefixDepths = []guard.PrefixWindow{{Limit: 100, Window: time.Hour, DigitsDropped: 5}}
	cases := []struct {
		o    guard.Override
		want problem.Code // "" allowed
	}{
		{guard.Override{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 10}, ""},
		{guard.Override{Kind: guard.OverrideCountryLimit, Subject: "NG", Limit: 11}, problem.CodeOverrideLooser},
		{guard.Override{Kind: guard.OverrideCountryLimit, Subject: "GH", Limit: 100}, ""},
		{guard.Override{Kind: guard.OverrideCountryLimit, Subject: "GH", Limit: 101}, problem.CodeOverrideLooser},
		{guard.Override{Kind: guard.OverrideBudgetHour, Limit: 51}, problem.CodeOverrideLooser},
		{guard.Override{Kind: guard.OverrideBudgetDay, Limit: 1_000_000}, ""}, // the file has no daily budget
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+234", Limit: 1_000_000}, ""},
		// A prefix the file counts (NG mobiles have 13 digits: per_prefix
		// drops 3, the depth 5): the override can only lower that counter.
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+2348031234", Limit: 20}, ""},
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+2348031234", Limit: 21}, problem.CodeOverrideLooser},
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+23480312", Limit: 101}, problem.CodeOverrideLooser},
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+23480312", Limit: 100}, ""},
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "+2348031", Limit: 500}, ""}, // a limit of its own
	}
	for _, tc := range cases {
		err := guard.CheckTightens(p, tc.o)
		if got := problem.CodeOf(err); got != tc.want {
			t.Errorf("CheckTightens(%s %s %d) = %v, want %q", tc.o.Kind, tc.o.Subject, tc.o.Limit, err, tc.want)
		}
	}
}

func TestNormalizeOverride(t *testing.T) {
	cases := []struct {
		o     guard.Override
		field string // "" valid
	}{
		{guard.Override{Kind: guard.OverrideCountryPause, Subject: " ng "}, ""},
		{guard.Override{Kind: guard.OverrideCountryPause, Subject: "001"}, ""},
		{guard.Override{Kind: guard.OverrideCountryPause, Subject: "XX"}, "subject"},
		{guard.Override{Kind: guard.OverrideCountryPause, Subject: "NG", Limit: 3}, "limit"},
		{guard.Override{Kind: guard.OverrideCountryLimit, Subject: "NG"}, "limit"},
		{guard.Override{Kind: guard.OverridePrefixLimit, Subject: "2348", Limit: 1}, "subject"},
		{guard.Override{Kind: guard.OverrideBudgetHour, Subject: "NG", Limit: 1}, "subject"},
		{guard.Override{Kind: "boost", Limit: 1}, "kind"},
	}
	for _, tc := range cases {
		got, err := guard.NormalizeOverride(tc.o)
		var fe *guard.OverrideError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("NormalizeOverride(%+v): %v, want valid", tc.o, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("NormalizeOverride(%+v): %v, want an error naming %s", tc.o, err, tc.field)
		}
		if tc.field == "" && tc.o.Kind == guard.OverrideCountryPause && got.Subject != "NG" && got.Subject != "001" {
			t.Errorf("NormalizeOverride subject %q, want it trimmed and upper-case", got.Subject)
		}
	}
}

// TestPauseOfGBCoversItsDependencies: libphonenumber gives the numbers of
// Guernsey, Jersey and the Isle of Man (+44, the UK's numbering plan)
// regions of their own; a pause of GB covers them, as an operator pausing
// +44 expects, and each can still be paused alone.
func TestPauseOfGBCoversItsDependencies(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	numbers := map[string]string{"GB": "+447400123456", "GG": "+447781123456", "JE": "+447797712345", "IM": "+447624123456"}
	for _, tc := range []struct {
		paused string
		want   map[string]problem.Code // by the number's region; "" sent
	}{
		{"GB", map[string]problem.Code{"GB": problem.CodeCountryPaused, "GG": problem.CodeCountryPaused,
			"JE": problem.CodeCountryPaused, "IM": problem.CodeCountryPaused}},
		{"JE", map[string]problem.Code{"GB": "", "GG": "", "JE": problem.CodeCountryPaused, "IM": ""}},
	} {
		t.Run(tc.paused, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.OTP.CountryVelocity.Mode = guard.VelocityOff
			p.FillDefaults()
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
				Now: func() time.Time { return now }, Overrides: fakeOverrides([]guard.Override{
					{Kind: guard.OverrideCountryPause, Subject: tc.paused, ExpiresAt: now.Add(time.Hour)}})})
			for region, number := range numbers {
				res, err := otp.Send(context.Background(), guard.SendRequest{Phone: number})
				if res.Phone.Region != region {
					t.Errorf("%s is in %s, want %s", number, res.Phone.Region, region)
				}
				if got := problem.CodeOf(err); got != tc.want[region] {
					t.Errorf("pause of %s, send to %s (%s): %q (%v), want %q", tc.paused, number, region, got, err, tc.want[region])
				}
			}
		})
	}
}
