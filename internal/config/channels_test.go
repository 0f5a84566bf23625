package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestChannels: a channel is on when its settings are set, config check
// says which are, and a WhatsApp sender without its template (or bad
// values with OTPGUARD_SMS=twilio) is refused at start.
func TestChannels(t *testing.T) {
	base := map[string]string{
		"OTPGUARD_SMS":       "twilio",
		"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef",
		"TWILIO_AUTH_TOKEN":  "0123456789abcdef0123456789abcdef",
		"TWILIO_FROM":        "+14155550100",
	}
	load := func(t *testing.T, more map[string]string) (*Config, error) {
		t.Helper()
		vars := map[string]string{}
		for k, v := range base {
			vars[k] = v
		}
		for k, v := range more {
			vars[k] = v
		}
		cfg, err := Load(func(k string) string { return vars[k] })
		if err != nil {
			t.Fatal(err)
		}
		return cfg, cfg.checkTwilio()
	}
	for _, tc := range []struct {
		name    string
		more    map[string]string
		want    []string
		wantErr string // in the error; "" none
	}{
		{name: "sms only", want: []string{"sms"}},
		{name: "all three", more: map[string]string{"TWILIO_WHATSAPP_FROM": "+14155550111",
			"TWILIO_WHATSAPP_CONTENT_SID": "HX0123456789abcdef0123456789abcdef", "TWILIO_VOICE_FROM": "+14155550122"},
			want: []string{"sms", "whatsapp", "call"}},
		{name: "call", more: map[string]string{"TWILIO_VOICE_FROM": "+14155550122"}, want: []string{"sms", "call"}},
		{name: "whatsapp sender without its template", more: map[string]string{"TWILIO_WHATSAPP_FROM": "+14155550111"},
			want: []string{"sms"}, wantErr: "TWILIO_WHATSAPP_CONTENT_SID"},
		{name: "a bad content SID", more: map[string]string{"TWILIO_WHATSAPP_FROM": "+14155550111", "TWILIO_WHATSAPP_CONTENT_SID": "MG01"},
			want: []string{"sms", "whatsapp"}, wantErr: "content SID"},
		{name: "a bad caller", more: map[string]string{"TWILIO_VOICE_FROM": "caller"},
			want: []string{"sms", "call"}, wantErr: "voice: from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.more)
			if diff := cmp.Diff(tc.want, cfg.Channels()); diff != "" {
				t.Errorf("Channels() (-want +got):\n%s", diff)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkTwilio() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkTwilio() = %v, want an error naming %s", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var out strings.Builder
			if err := cfg.Describe(&out); err != nil {
				t.Fatal(err)
			}
			if line := "# channels: " + strings.Join(tc.want, ", ") + "\n"; !strings.Contains(out.String(), line) {
				t.Errorf("config check does not say %q:\n%s", line, out.String())
			}
		})
	}
}

// TestFallbackChannelOn: otp.fallback_channel must name a channel these
// settings turn on; none is always fine.
func TestFallbackChannelOn(t *testing.T) {
	for _, tc := range []struct {
		name, fallback string
		whatsApp       bool
		wantErr        bool
	}{
		{name: "none", fallback: ""},
		{name: "whatsapp on", fallback: "whatsapp", whatsApp: true},
		{name: "whatsapp off", fallback: "whatsapp", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if tc.whatsApp {
				cfg.Twilio.WhatsAppFrom, cfg.Twilio.WhatsAppContentSID = "+14155550111", "HX0123456789abcdef0123456789abcdef"
			}
			cfg.Policies.OTP.FallbackChannel = tc.fallback
			err = cfg.checkPolicies()
			if got := err != nil; got != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "otp.fallback_channel")) {
				t.Errorf("checkPolicies() = %v, want an error naming otp.fallback_channel: %v", err, tc.wantErr)
			}
		})
	}
}
