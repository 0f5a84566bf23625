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
		{"carrier floor share", func(o *guard.OTPPolicy) { o.CountryVelocity.CarrierFloorShare = 1.5 }, "otp.country_velocity.carrier_floor_share"},
		{"carrier floor share 0", func(o *guard.OTPPolicy) { o.CountryVelocity.CarrierFloorShare = 0 }, "otp.country_velocity.carrier_floor_share"},
		{"cold warm conversion above 1", func(o *guard.OTPPolicy) { o.CountryVelocity.ColdWarmConversion = 1.5 }, "otp.country_velocity.cold_warm_conversion"},
		{"cold warm conversion below 0", func(o *guard.OTPPolicy) { o.CountryVelocity.ColdWarmConversion = -0.1 }, "otp.country_velocity.cold_warm_conversion"},
		{"fallback by SMS", func(o *guard.OTPPolicy) { o.FallbackChannel = guard.ChannelSMS }, "otp.fallback_channel"},
		{"fallback by call, which the automatic rules hold", func(o *guard.OTPPolicy) { o.FallbackChannel = guard.ChannelCall }, "otp.fallback_channel"},
		{"fallback by no channel", func(o *guard.OTPPolicy) { o.FallbackChannel = "telegram" }, "otp.fallback_channel"},
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
	p.OTP.FallbackChannel = guard.ChannelWhatsApp
	if err := p.Validate(); err != nil {
		t.Errorf("fallback_channel whatsapp: %v", err)
	}
}

// A country code must be one libphonenumber has numbering data for; the
// usual slips are answered with the code that was meant.
func TestPolicyCountryCodesAreKnownRegions(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(o *guard.OTPPolicy)
	}{
		{"UK is GB", `otp.allowed_countries[0]: "UK" is not a region code libphonenumber knows: use "GB"`,
			func(o *guard.OTPPolicy) { o.AllowedCountries = []string{"UK"} }},
		{"per-country UK", `otp.per_country.UK: "UK" is not a region code libphonenumber knows: use "GB"`,
			func(o *guard.OTPPolicy) { o.PerCountry = map[string]guard.Window{"UK": {Limit: 5, Window: time.Hour}} }},
		{"EL is GR", `use "GR"`,
			func(o *guard.OTPPolicy) { o.AllowedCountries = []string{"EL"} }},
		{"no such region", `otp.allowed_countries[1]: "XY" is not a region code libphonenumber knows`,
			func(o *guard.OTPPolicy) { o.AllowedCountries = []string{"IN", "XY"} }},
		{"lower case named", `otp.allowed_countries[0]: must be an upper-case ISO 3166-1 alpha-2 code: "GB", not "gb"`,
			func(o *guard.OTPPolicy) { o.AllowedCountries = []string{"gb"} }},
		{"default region", `otp.default_region: "UK" is not a region code`,
			func(o *guard.OTPPolicy) { o.DefaultRegion = "uk" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			tc.edit(&p.OTP)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: got %v, want it to contain %s", err, tc.want)
			}
		})
	}
	p := guard.DefaultPolicies()
	p.OTP.AllowedCountries = []string{"GB", "IN", "US"}
	p.OTP.PerCountry = map[string]guard.Window{"GB": {Limit: 5, Window: time.Hour}, "*": {Limit: 50, Window: time.Hour}}
	p.OTP.DefaultRegion = "gb" // the default region may be written in lower case, as before
	if err := p.Validate(); err != nil {
		t.Errorf("known regions: %v", err)
	}
}
