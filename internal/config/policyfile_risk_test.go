package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestDecodeRisk: otp.risk over its defaults (off, 75/25, 24h/720h/720h,
// vouched 50, 1000 an hour, 10000 a day, 1500ms), country codes in either
// case, and each bad value refused naming its field.
func TestDecodeRisk(t *testing.T) {
	p, err := decodePolicies([]byte("otp:\n  risk:\n    mode: on\n    countries: [ng, PK]\n    refuse_above: 80\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := guard.DefaultRisk()
	want.Mode, want.Countries, want.RefuseAbove = guard.RiskOn, []string{"NG", "PK"}, 80
	if diff := cmp.Diff(want, p.OTP.Risk); diff != "" {
		t.Errorf("otp.risk (-want +got):\n%s", diff)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	def, err := decodePolicies([]byte("otp: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := def.OTP.Risk; d.Mode != guard.RiskOff || d.RefuseAbove != 75 || d.AllowBelow != 25 || d.HighFor != 24*time.Hour ||
		d.LowFor != 720*time.Hour || d.MidFor != 720*time.Hour || d.VouchedFloor != 50 || d.PerHour != 1000 || d.PerDay != 10000 ||
		d.Timeout != 1500*time.Millisecond {
		t.Errorf("otp.risk left out: %+v, want the documented defaults", d)
	}
	bad := map[string]string{
		"mode: maybe":                     "otp.risk.mode",
		"allow_below: 80":                 "otp.risk: need 0 <= allow_below < refuse_above",
		"refuse_above: 101":               "otp.risk: need",
		"high_for: 10s":                   "otp.risk.high_for",
		"low_for: 0s":                     "otp.risk.low_for",
		"mid_for: 100000h":                "otp.risk.mid_for",
		"countries: [XX]":                 "otp.risk.countries",
		"vouched_floor: 0":                "otp.risk.vouched_floor",
		"per_hour: 0":                     "otp.risk.per_hour",
		"per_hour: 300\n    per_day: 200": "otp.risk.per_day",
		"timeout: 50ms":                   "otp.risk.timeout",
		"timeout: 11s":                    "otp.risk.timeout",
	}
	for line, field := range bad {
		p, err := decodePolicies([]byte("otp:\n  risk:\n    " + line + "\n"))
		if err == nil {
			err = p.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", line, err, field)
		}
	}
}

// TestRiskWarning: otp.risk mode on without the Twilio account (and no
// lookup of the program's own) is warned of, by config check too; with
// the account, or a lookup given, or mode off, nothing is said.
func TestRiskWarning(t *testing.T) {
	c := &Config{Policies: guard.DefaultPolicies()}
	if w := c.RiskWarning(false); w != "" {
		t.Errorf("mode off: %q, want none", w)
	}
	c.Policies.OTP.Risk.Mode = guard.RiskOn
	if w := c.RiskWarning(false); !strings.Contains(w, "otp.risk.mode is on but no risk lookup is available") {
		t.Errorf("mode on, no account: %q, want the warning", w)
	}
	var out strings.Builder
	if err := c.Describe(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# warning: otp.risk.mode is on but no risk lookup is available") {
		t.Errorf("config check does not say it:\n%s", out.String())
	}
	if w := c.RiskWarning(true); w != "" {
		t.Errorf("mode on, a lookup given: %q, want none", w)
	}
	c.Twilio.AccountSID, c.Twilio.AuthToken = "AC0123", "token"
	if w := c.RiskWarning(false); w != "" {
		t.Errorf("mode on, the account set: %q, want none", w)
	}
}
