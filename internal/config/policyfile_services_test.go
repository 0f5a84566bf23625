package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestServicePolicyEveryField: the round trip's policies carry a service's
// otp: block with every field set (TestPolicyFileRoundTrip walks no
// list, so it would not see one left zero).
func TestServicePolicyEveryField(t *testing.T) {
	if zero := zeroFields(reflect.ValueOf(*everyServiceField()), "ServicePolicy"); len(zero) > 0 {
		t.Fatalf("everyServiceField leaves %v zero; set them, so that the round trip covers them", zero)
	}
	p := everyField()
	p.Limits = nil // everyField's limit sets every field, which no one algorithm takes
	if err := p.Validate(); err != nil {
		t.Fatalf("everyField does not validate: %v", err)
	}
}

// TestDecodeServicePolicy: a service's otp: block is read as the keys it
// gives (0s is a cooldown of none, not the deployment's), a misspelt key
// in it is named by its path and line, and a block with nothing in it
// (otp: ~) is no block.
func TestDecodeServicePolicy(t *testing.T) {
	const service = "services:\n  - sid: VA0123456789abcdef0123456789abcdef\n    friendly_name: Shop\n" +
		"    account_sid: AC0123456789abcdef0123456789abcdef\n" +
		"    credentials: [{sid: SK0123456789abcdef0123456789abcdef, secret_file: /run/secrets/shop}]\n"
	none := time.Duration(0)
	for _, tc := range []struct {
		name    string
		otp     string
		want    *guard.ServicePolicy
		wantErr string
	}{
		{name: "no block", otp: "", want: nil},
		{name: "a null block", otp: "    otp: ~\n", want: nil},
		{name: "some fields", otp: "    otp: {code_length: 8, code_ttl: 10m, per_phone: {limit: 2, window: 1h}, channels: [sms, whatsapp], budget: {per_day: 100}}\n",
			want: &guard.ServicePolicy{CodeLength: 8, CodeTTL: 10 * time.Minute, PerPhone: guard.Window{Limit: 2, Window: time.Hour},
				Channels: []string{"sms", "whatsapp"}, Budget: guard.Budget{PerDay: 100}}},
		{name: "a cooldown of none", otp: "    otp: {cooldown: 0s}\n", want: &guard.ServicePolicy{Cooldown: &none}},
		{name: "a misspelt key", otp: "    otp:\n      code_lengt: 8\n",
			wantErr: "line 7: services[0].otp.code_lengt: unknown field (did you mean code_length?)"},
		{name: "a bad value", otp: "    otp: {per_phone: {limit: lots}}\n",
			wantErr: `services[0].otp.per_phone.limit: want a whole number, got "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decodePolicies([]byte(service + tc.otp))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.Services[0].OTP); diff != "" {
				t.Errorf("services[0].otp (-want +got):\n%s", diff)
			}
			var b strings.Builder // and back, as config check writes it
			if err := encodePolicies(&b, p); err != nil {
				t.Fatal(err)
			}
			again, err := decodePolicies([]byte(b.String()))
			if err != nil {
				t.Fatalf("reading back what config check prints: %v\n%s", err, b.String())
			}
			if diff := cmp.Diff(tc.want, again.Services[0].OTP); diff != "" {
				t.Errorf("services[0].otp through YAML (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServiceChannelsOn: a service's otp.channels must name channels these
// settings turn on, as otp.fallback_channel must; SMS is always on.
func TestServiceChannelsOn(t *testing.T) {
	for _, tc := range []struct {
		name     string
		channels []string
		whatsApp bool
		wantErr  bool
	}{
		{name: "none of its own", channels: nil},
		{name: "sms", channels: []string{"sms"}},
		{name: "whatsapp on", channels: []string{"sms", "whatsapp"}, whatsApp: true},
		{name: "whatsapp off", channels: []string{"sms", "whatsapp"}, wantErr: true},
		{name: "call off", channels: []string{"call"}, whatsApp: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			if tc.whatsApp {
				cfg.Twilio.WhatsAppFrom, cfg.Twilio.WhatsAppContentSID = "+14155550100", "HX0123456789abcdef0123456789abcdef"
			}
			svc := everyField().Services[1]
			svc.OTP = &guard.ServicePolicy{Channels: tc.channels}
			cfg.Policies.Services = []guard.Service{svc}
			err = cfg.checkPolicies()
			if got := err != nil; got != tc.wantErr || (err != nil && !strings.Contains(err.Error(), "services[0].otp.channels[")) {
				t.Errorf("checkPolicies() = %v, want an error naming services[0].otp.channels: %v", err, tc.wantErr)
			}
		})
	}
}
