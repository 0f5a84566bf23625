package guard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

func TestAbusePolicyValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(o *guard.OTPPolicy)
		field string
	}{
		{"country lower case", func(o *guard.OTPPolicy) { o.AllowedCountries = []string{"IN", "gb"} }, "otp.allowed_countries[1]"},
		{"unknown number type", func(o *guard.OTPPolicy) { o.AllowedNumberTypes = []string{"mobile", "cell"} }, "otp.allowed_number_types[1]"},
		{"prefix limit", func(o *guard.OTPPolicy) { o.PerPrefix.Limit = -1 }, "otp.per_prefix.limit"},
		{"prefix window", func(o *guard.OTPPolicy) { o.PerPrefix.Window = 0 }, "otp.per_prefix.window"},
		{"prefix digits", func(o *guard.OTPPolicy) { o.PerPrefix.DigitsDropped = 12 }, "otp.per_prefix.digits_dropped"},
		{"country key", func(o *guard.OTPPolicy) {
			o.PerCountry = map[string]guard.Window{"india": {Limit: 1, Window: time.Hour}}
		}, "otp.per_country.india"},
		{"country limit", func(o *guard.OTPPolicy) {
			o.PerCountry = map[string]guard.Window{"IN": {Limit: 0, Window: time.Hour}}
		}, "otp.per_country.IN.limit"},
		{"default country window", func(o *guard.OTPPolicy) {
			o.PerCountry = map[string]guard.Window{"*": {Limit: 5}}
		}, "otp.per_country.*.window"},
		{"budget per hour", func(o *guard.OTPPolicy) { o.Budget.PerHour = -5 }, "otp.budget.per_hour"},
		{"budget per day", func(o *guard.OTPPolicy) { o.Budget.PerDay = -1 }, "otp.budget.per_day"},
		{"conversion mode", func(o *guard.OTPPolicy) { o.Conversion.Mode = "alert" }, "otp.conversion.mode"},
		{"conversion rate", func(o *guard.OTPPolicy) { o.Conversion.MinRate = 1.5 }, "otp.conversion.min_rate"},
		{"conversion sends", func(o *guard.OTPPolicy) { o.Conversion.MinSends = 0 }, "otp.conversion.min_sends"},
		{"block for", func(o *guard.OTPPolicy) {
			o.Conversion.Mode, o.Conversion.BlockFor = guard.ConversionBlock, time.Second
		}, "otp.conversion.block_for"},
		{"safe list", func(o *guard.OTPPolicy) { o.SafeList = []string{"+9198", "9198"} }, "otp.safe_list[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			tc.edit(&p.OTP)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("Validate: got %v, want an error naming %s", err, tc.field)
			}
		})
	}
	p := guard.DefaultPolicies()
	if err := p.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
