package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestHighRiskDestinations: non-geographic numbers (+870, +881, +882, ...)
// are refused by default, even those typed mobile, and an operator allows
// them by prefix in otp.allow_high_risk; the type and country rules still
// apply to what is allowed, and the list is validated.
func TestHighRiskDestinations(t *testing.T) {
	for _, tc := range []struct {
		name      string
		phone     string
		allow     []string
		types     []string // nil: the default types
		countries []string
		want      problem.Code // "": sent
	}{
		{name: "Inmarsat +870, typed mobile: refused", phone: "+870301234567", want: problem.CodeCountryNotAllowed},
		{name: "GMSS satellite +881, typed mobile: refused", phone: "+881612345678", want: problem.CodeCountryNotAllowed},
		{name: "international network +882, typed mobile: refused", phone: "+8823421234", want: problem.CodeCountryNotAllowed},
		{name: "international network +883: refused", phone: "+883510012345", want: problem.CodeCountryNotAllowed},
		{name: "premium rate +979: refused", phone: "+979123456789", want: problem.CodeCountryNotAllowed},
		{name: "a geographic mobile: sent", phone: "+447400123456"},
		{name: "+881 allowed by its prefix: sent", phone: "+881612345678", allow: []string{"+881"}},
		{name: "+882 34 allowed, +870 still refused", phone: "+870301234567", allow: []string{"+88234"}, want: problem.CodeCountryNotAllowed},
		{name: "allowed +881 with a country list: sent", phone: "+881612345678", allow: []string{"+881"}, countries: []string{"GB"}},
		{name: "allowed +883 is voip: the type rule refuses", phone: "+883510012345", allow: []string{"+883"}, want: problem.CodeNumberTypeNotAllowed},
		{name: "allowed +883 with voip allowed: sent", phone: "+883510012345", allow: []string{"+883"}, types: []string{"mobile", "voip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.OTP.AllowHighRisk = tc.allow
			p.OTP.AllowedCountries = tc.countries
			if tc.types != nil {
				p.OTP.AllowedNumberTypes = tc.types
			}
			p.OTP.CountryVelocity.Mode = guard.VelocityOff
			p.FillDefaults()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			st := guardtest.NewOutageStore()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey})
			t.Cleanup(otp.Close)
			_, err := otp.Send(context.Background(), guard.SendRequest{Phone: tc.phone})
			var ge *problem.Error
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("send %s: %v, want sent", tc.phone, err)
			case tc.want != "" && (!errors.As(err, &ge) || ge.Code != tc.want):
				t.Errorf("send %s: got %v, want %s", tc.phone, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"+44", "+8", "881", "+881x"} {
		p := guard.DefaultPolicies()
		p.OTP.AllowHighRisk = []string{bad}
		p.FillDefaults()
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "otp.allow_high_risk[0]") {
			t.Errorf("allow_high_risk %q: got %v, want an error naming the field", bad, err)
		}
	}
}
