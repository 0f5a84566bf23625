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

// The numbers of Nigeria's carriers these tests send to (libphonenumber's
// carrier data: +234803 is MTN's, +234805 Glo's, +234802 Airtel's).
const (
	mtnNG    = "+2348031234567"
	gloNG    = "+2348051234567"
	airtelNG = "+2348021234567"
)

func TestCarrierOfTheTestNumbers(t *testing.T) {
	for number, want := range map[string]guard.Carrier{mtnNG: {Name: "MTN", Key: "mtn"}, gloNG: {Name: "Glo", Key: "glo"},
		airtelNG: {Name: "Airtel", Key: "airtel"}} {
		p, err := guard.ParsePhone(number, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := guard.CarrierOf(p); got != want {
			t.Errorf("CarrierOf(%s) = %+v, want %+v", number, got, want)
		}
	}
}

func TestNormalizeCarrierOverride(t *testing.T) {
	cases := []struct {
		name    string
		kind    guard.OverrideKind
		subject string
		limit   int64
		want    string       // the subject normalised, when valid
		field   string       // the field at fault, when refused
		code    problem.Code // and the refusal's code
	}{
		{"spaced, as the desk names it", guard.OverrideCarrierPause, "NG / MTN", 0, "NG/mtn", "", ""},
		{"lower-case country", guard.OverrideCarrierPause, "ng/MTN", 0, "NG/mtn", "", ""},
		{"canonical", guard.OverrideCarrierLimit, "NG/mtn", 5, "NG/mtn", "", ""},
		{"a name of several words", guard.OverrideCarrierLimit, " in / Vodafone Idea ", 5, "IN/vodafone-idea", "", ""},
		{"the carrier of numbers with none", guard.OverrideCarrierPause, "NG/unknown", 0, "NG/unknown", "", ""},
		{"non-geographic", guard.OverrideCarrierPause, "001/x", 0, "001/x", "", ""},
		{"unknown country", guard.OverrideCarrierPause, "XX/MTN", 0, "", "subject", problem.CodeUnknownCountry},
		{"a country name, not a code", guard.OverrideCarrierLimit, "Nigeria/MTN", 5, "", "subject", problem.CodeUnknownCountry},
		{"no carrier", guard.OverrideCarrierPause, "NG/", 0, "", "subject", problem.CodeInvalidRequest},
		{"punctuation for a carrier", guard.OverrideCarrierPause, "NG/ - ", 0, "", "subject", problem.CodeInvalidRequest},
		{"no country", guard.OverrideCarrierPause, "/MTN", 0, "", "subject", problem.CodeInvalidRequest},
		{"no slash", guard.OverrideCarrierPause, "NG MTN", 0, "", "subject", problem.CodeInvalidRequest},
		{"a pause with a limit", guard.OverrideCarrierPause, "NG/MTN", 3, "", "limit", problem.CodeInvalidRequest},
		{"a limit without one", guard.OverrideCarrierLimit, "NG/MTN", 0, "", "limit", problem.CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guard.NormalizeOverride(guard.Override{Kind: tc.kind, Subject: tc.subject, Limit: tc.limit})
			if tc.field == "" {
				if err != nil || got.Subject != tc.want {
					t.Fatalf("NormalizeOverride(%s %q) = %q, %v; want %q", tc.kind, tc.subject, got.Subject, err, tc.want)
				}
				return
			}
			var fe *guard.OverrideError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Err.Code != tc.code {
				t.Fatalf("NormalizeOverride(%s %q): %v, want %s naming %s", tc.kind, tc.subject, err, tc.code, tc.field)
			}
		})
	}
	// No file limit per carrier: any carrier limit tightens.
	p := guard.DefaultPolicies().OTP
	p.PerCountry = map[string]guard.Window{"NG": {Limit: 10, Window: time.Hour}}
	if err := guard.CheckTightens(p, guard.Override{Kind: guard.OverrideCarrierLimit, Subject: "NG/mtn", Limit: 1_000}); err != nil {
		t.Errorf("CheckTightens(carrier_limit): %v, want none (the file has no carrier limit)", err)
	}
}

func TestSubjectName(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{guard.SubjectName("NG", "MTN"), "NG / MTN"},
		{guard.SubjectName("", "Airtel"), "001 / Airtel"},
		{guard.OverrideSubjectName(guard.Override{Kind: guard.OverrideCarrierPause, Subject: "NG/mtn"}), "NG / MTN"},
		{guard.OverrideSubjectName(guard.Override{Kind: guard.OverrideCountryPause, Subject: "NG"}), "NG"},
		{guard.CarrierSubjectName("IN/vodafone-idea"), "IN / VODAFONE-IDEA"},
		{guard.CarrierSubjectName("+2348031"), "+2348031"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestCarrierOverridesTouchOnlyTheirCarrier: a pause or a limit of NG's
// MTN refuses sends to MTN's numbers only: Glo's and Airtel's, and other
// countries', still go.
func TestCarrierOverridesTouchOnlyTheirCarrier(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	until := now.Add(90 * time.Minute)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone.Limit = 100
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.FillDefaults()
	for _, tc := range []struct {
		name string
		over guard.Override
		// allowed is how many sends to distinct MTN numbers pass before
		// refusal with code.
		allowed int
		code    problem.Code
	}{
		{"pause", guard.Override{Kind: guard.OverrideCarrierPause, Subject: "NG/mtn", ExpiresAt: until}, 0, problem.CodeCarrierPaused},
		{"limit", guard.Override{Kind: guard.OverrideCarrierLimit, Subject: "NG/mtn", Limit: 3, ExpiresAt: until}, 3, problem.CodeCarrierRateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
				Now: func() time.Time { return now }, Overrides: fakeOverrides{tc.over}})
			send := func(phone string) error {
				_, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone})
				return err
			}
			for i := range tc.allowed {
				if err := send(fmt.Sprintf("+23480312345%02d", i)); err != nil {
					t.Fatalf("MTN send %d: %v, want sent", i+1, err)
				}
			}
			err := send(mtnNG)
			wantCode(t, err, tc.code)
			var e *problem.Error
			if tc.code == problem.CodeCarrierPaused && (!errors.As(err, &e) || e.RetryAfter != 90*time.Minute) {
				t.Errorf("pause: %v, want a RetryAfter of the 90 minutes it has left", err)
			}
			for _, other := range []string{gloNG, airtelNG, "+447400123456"} {
				for range tc.allowed + 1 {
					if err := send(other); err != nil {
						t.Errorf("send to %s while NG / MTN is held: %v, want sent", other, err)
					}
				}
			}
		})
	}
}

// TestCountryPauseBeforeCarrierPause: a number whose country and carrier
// are both paused is refused as the country's.
func TestCountryPauseBeforeCarrierPause(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	p := guard.DefaultPolicies()
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.FillDefaults()
	st := guardtest.NewOutageStore()
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
		Now: func() time.Time { return now }, Overrides: fakeOverrides{
			{Kind: guard.OverrideCarrierPause, Subject: "NG/mtn", ExpiresAt: now.Add(time.Hour)},
			{Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: now.Add(time.Hour)}}})
	_, err := otp.Send(context.Background(), guard.SendRequest{Phone: mtnNG})
	wantCode(t, err, problem.CodeCountryPaused)
}
