package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// everyField is a policy set with no field left zero, so that a field
// the file format forgets cannot pass the round trip unseen.
func everyField() guard.Policies {
	return guard.Policies{
		OTP: guard.OTPPolicy{
			CodeLength:         8,
			CodeTTL:            4 * time.Minute,
			MaxVerifyAttempts:  4,
			Cooldown:           45 * time.Second,
			PerPhone:           guard.Window{Limit: 4, Window: 15 * time.Minute},
			PerIP:              guard.Window{Limit: 25, Window: 2 * time.Hour},
			DefaultRegion:      "IN",
			Message:            "Code {code}",
			Messages:           map[string]string{"es": "Código {code}", "pt-BR": "Código {code}"},
			Mode:               limit.ModeExact,
			OnStoreError:       limit.FallbackLocal,
			LocalLimit:         2,
			AllowedCountries:   []string{"IN", "GB"},
			AllowedNumberTypes: []string{"mobile"},
			AllowHighRisk:      []string{"+881"},
			PerPrefix:          guard.PrefixWindow{Limit: 50, Window: 2 * time.Hour, DigitsDropped: 3},
			PrefixDepths:       []guard.PrefixWindow{{Limit: 400, Window: time.Hour, DigitsDropped: 6}},
			CountryVelocity: guard.CountryVelocity{Mode: guard.VelocityEnforce, Floor: 80, Factor: 4,
				Lookback: 72 * time.Hour, Expected: map[string]int64{"NG": 500},
				QuarantineFor: 12 * time.Hour, MinuteShare: 0.25, UnverifiedFloor: 15, UnverifiedShare: 0.2,
				ColdPerHour: 40, ColdPerDay: 200, ColdBelow: 5, ColdWarmConversion: 0.7,
				CarrierSplit: true, CarrierFloorShare: 0.2, GrowthPerDay: 1.5},
			PerCountry: map[string]guard.Window{
				"IN": {Limit: 2000, Window: time.Hour},
				"*":  {Limit: 200, Window: time.Hour},
			},
			Budget:     guard.Budget{PerHour: 5000, PerDay: 50000},
			Conversion: guard.ConversionPolicy{Mode: guard.ConversionBlock, MinRate: 0.3, MinSends: 40, BlockFor: 2 * time.Hour, Delay: 3 * time.Minute, Relative: 0.4, HistoryMinSends: 100},
			SafeList:   []string{"+14155550100", "+4474001"},
			Challenge: guard.ChallengePolicy{Type: guard.ChallengeCaptcha, MaxNumber: 50_000, Expires: 2 * time.Minute,
				Floor: 7, CutFor: 6 * time.Hour},
			Trust: guard.TrustPolicy{VerifiedWithin: 30 * 24 * time.Hour, Floor: 40, Factor: 2.5, HoldFor: 48 * time.Hour},
			Channels: map[string]guard.ChannelPolicy{guard.ChannelSMS: {Price: 1}, guard.ChannelWhatsApp: {PerPhone: guard.Window{Limit: 2, Window: time.Hour}, Price: 2},
				guard.ChannelCall: {PerPhone: guard.Window{Limit: 1, Window: 2 * time.Hour}, Price: 7}},
			FallbackChannel: guard.ChannelWhatsApp,
			Risk: guard.RiskPolicy{Mode: guard.RiskOn, RefuseAbove: 80, AllowBelow: 20, HighFor: 12 * time.Hour,
				LowFor: 240 * time.Hour, MidFor: 48 * time.Hour, Countries: []string{"NG", "PK"}, VouchedFloor: 30,
				PerHour: 100, PerDay: 1000, Timeout: time.Second},
		},
		Limits: map[string]limit.Policy{
			"bucket": {Algorithm: limit.TokenBucket, Capacity: 10, RefillPerSecond: 0.5, Limit: 1, Window: time.Minute,
				Shadow: true, OnStoreError: limit.FallbackLocal, LocalLimit: 3,
				Mode: limit.ModeSync, SyncInterval: 50 * time.Millisecond, Exact: true},
		},
		Services: []guard.Service{{SID: "VA0123456789abcdef0123456789abcdef", FriendlyName: "Shop",
			AccountSID: "AC0123456789abcdef0123456789abcdef", Default: true,
			Credentials: []guard.ServiceCredential{{SID: "SK0123456789abcdef0123456789abcdef", SecretFile: "/run/secrets/shop"}}},
			{SID: "VAfedcba9876543210fedcba9876543210", FriendlyName: "Bank", AccountSID: "AC0123456789abcdef0123456789abcdef",
				Credentials: []guard.ServiceCredential{{SID: "SKfedcba9876543210fedcba9876543210", SecretFile: "/run/secrets/bank"}},
				OTP:         everyServiceField()}},
	}
}

// everyServiceField is a service's otp: block with every field set.
func everyServiceField() *guard.ServicePolicy {
	cd := time.Minute
	return &guard.ServicePolicy{CodeLength: 8, CodeTTL: 10 * time.Minute, MaxVerifyAttempts: 3, Cooldown: &cd,
		PerPhone: guard.Window{Limit: 2, Window: time.Hour}, Message: "Bank: your code is {code}",
		Messages: map[string]string{"fr": "Banque : votre code est {code}"},
		Channels: []string{guard.ChannelSMS, guard.ChannelWhatsApp}, Budget: guard.Budget{PerHour: 500, PerDay: 5000}}
}

// zeroFields lists the fields of v (a struct, walked into structs and the
// values of maps) that are zero.
func zeroFields(v reflect.Value, path string) []string {
	var zero []string
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			name := path + "." + v.Type().Field(i).Name
			if f.IsZero() {
				zero = append(zero, name)
				continue
			}
			zero = append(zero, zeroFields(f, name)...)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			zero = append(zero, zeroFields(v.MapIndex(k), path+"["+k.String()+"]")...)
		}
	}
	return zero
}

// TestPolicyFileRoundTrip: guard.Policies -> the file format -> back is the
// same policies, field for field; and so is writing them as YAML (what
// `config check` prints) and reading that over the defaults.
func TestPolicyFileRoundTrip(t *testing.T) {
	filled := guard.DefaultPolicies()
	filled.FillDefaults()
	empty := guard.DefaultPolicies()
	empty.OTP.AllowedCountries, empty.OTP.AllowedNumberTypes, empty.OTP.SafeList = []string{}, []string{}, []string{}
	empty.OTP.PerCountry = map[string]guard.Window{}

	// Independent is no field of the file: the Envoy rules set it
	// (internal/envoy). SMS has no window of its own (per_phone is it).
	zero := slices.DeleteFunc(zeroFields(reflect.ValueOf(everyField()), "Policies"), func(f string) bool {
		return f == "Policies.Limits[bucket].Independent" || strings.HasPrefix(f, "Policies.OTP.Channels[sms].PerPhone")
	})
	if len(zero) > 0 {
		t.Fatalf("everyField leaves %v zero; set them, so that the round trip covers them", zero)
	}
	for _, tc := range []struct {
		name string
		p    guard.Policies
	}{
		{"defaults", guard.DefaultPolicies()},
		{"defaults filled", filled},
		{"every field set", everyField()},
		{"empty lists and maps", empty},
		{"zero", guard.Policies{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.p, policyFile(tc.p).policies()); diff != "" {
				t.Errorf("policies -> file format -> policies (-want +got):\n%s", diff)
			}
		})
	}
	for _, tc := range []struct {
		name string
		p    guard.Policies
	}{
		{"defaults filled", filled},
		{"every field set", everyField()},
	} {
		t.Run(tc.name+" through YAML", func(t *testing.T) {
			var b strings.Builder
			if err := encodePolicies(&b, tc.p); err != nil {
				t.Fatal(err)
			}
			got, err := decodePolicies([]byte(b.String()))
			if err != nil {
				t.Fatalf("reading back what config check prints: %v\n%s", err, b.String())
			}
			// YAML writes a nil list as [] and reads [] back as empty.
			if diff := cmp.Diff(tc.p, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("policies -> YAML -> policies (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodePolicies: the file is read over the defaults, a file naming
// limits replaces the default policy, and a bad value names its line.
func TestDecodePolicies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		want    func(p *guard.Policies) // applied to the filled defaults
		wantErr []string                // every one must appear in the error
	}{
		{name: "empty file is not a policy", file: "", wantErr: []string{"empty"}},
		{name: "whitespace only is not a policy", file: "  \n\n   \n", wantErr: []string{"empty"}},
		{name: "only a comment is not a policy", file: "# nothing\n", wantErr: []string{"empty"}},
		{name: "otp: null is not a policy", file: "otp: null\n", wantErr: []string{"line 1: otp: empty section"}},
		{name: "an empty otp section is not a policy", file: "otp:\nlimits: {}\n", wantErr: []string{"line 1: otp: empty section"}},
		{name: "limits: null is not a policy", file: "limits: ~\n", wantErr: []string{"line 1: limits: empty section"}},
		{name: "a word is not a policy", file: "hello\n", wantErr: []string{"line 1: (the file): want a section of keys"}},
		{name: "a second document", file: "otp:\n  per_phone: {limit: 9}\n---\notp:\n  per_phone: {limit: 1}\n",
			wantErr: []string{"line 3: a second YAML document"}},
		{name: "a second empty document", file: "otp:\n  per_phone: {limit: 9}\n---\n", wantErr: []string{"a second YAML document"}},
		{name: "one nested field keeps its neighbours", file: "otp:\n  per_phone: {limit: 9}\n",
			want: func(p *guard.Policies) { p.OTP.PerPhone.Limit = 9 }},
		{name: "limits replace the default policy",
			file: "limits:\n  search: {algorithm: fixed_window, limit: 300, window: 1m}\n",
			want: func(p *guard.Policies) {
				p.Limits = map[string]limit.Policy{"search": {Algorithm: limit.FixedWindow, Limit: 300,
					Window: time.Minute, OnStoreError: limit.FallbackOpen}}
			}},
		{name: "empty limits keep the default policy", file: "limits: {}\n", want: func(*guard.Policies) {}},
		{name: "sync mode gets its default interval",
			file: "limits:\n  hot: {algorithm: token_bucket, capacity: 5, refill_per_second: 1, mode: sync}\n",
			want: func(p *guard.Policies) {
				p.Limits = map[string]limit.Policy{"hot": {Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 1,
					OnStoreError: limit.FallbackOpen, Mode: limit.ModeSync, SyncInterval: limit.DefaultSyncInterval}}
			}},
		{name: "cold_per_hour 0 turns the cold room off, its neighbours kept", file: "otp:\n  country_velocity: {cold_per_hour: 0}\n",
			want: func(p *guard.Policies) { p.OTP.CountryVelocity.ColdPerHour = 0 }},
		{name: "conversion left empty is filled", file: "otp:\n  conversion: {mode: \"\"}\n", want: func(*guard.Policies) {}},
		{name: "carrier split off keeps the rest of the velocity rule", file: "otp:\n  country_velocity: {carrier_split: false}\n",
			want: func(p *guard.Policies) { p.OTP.CountryVelocity.CarrierSplit = false }},
		{name: "carrier floor share", file: "otp:\n  country_velocity: {carrier_floor_share: 0.25}\n",
			want: func(p *guard.Policies) { p.OTP.CountryVelocity.CarrierFloorShare = 0.25 }},
		{name: "growth_per_day 0 is the default", file: "otp:\n  country_velocity: {mode: enforce, floor: 50, factor: 3, lookback: 168h, quarantine_for: 24h, minute_share: 0.1, unverified_floor: 20, unverified_share: 0.1, growth_per_day: 0}\n",
			want: func(*guard.Policies) {}},
		{name: "growth_per_day set", file: "otp:\n  country_velocity: {mode: enforce, floor: 50, factor: 3, lookback: 168h, quarantine_for: 24h, minute_share: 0.1, unverified_floor: 20, unverified_share: 0.1, growth_per_day: 3}\n",
			want: func(p *guard.Policies) { p.OTP.CountryVelocity.GrowthPerDay = 3 }},
		{name: "cold_warm_conversion 0 is off", file: "otp:\n  country_velocity: {cold_warm_conversion: 0}\n",
			want: func(p *guard.Policies) { p.OTP.CountryVelocity.ColdWarmConversion = 0 }},
		{name: "trust without hold_for holds for the default", file: "otp:\n  trust: {floor: 100}\n", want: func(*guard.Policies) {}},
		{name: "hold_for 0 holds nothing", file: "otp:\n  trust: {hold_for: 0s}\n",
			want: func(p *guard.Policies) { p.OTP.Trust.HoldFor = 0 }},
		{name: "a fallback channel", file: "otp:\n  fallback_channel: whatsapp\n",
			want: func(p *guard.Policies) { p.OTP.FallbackChannel = guard.ChannelWhatsApp }},
		{name: "no fallback channel is the default", file: "otp:\n  fallback_channel: \"\"\n", want: func(*guard.Policies) {}},
		{name: "bad duration names its line",
			file:    "limits:\n  api:\n    algorithm: fixed_window\n    limit: 10\n    window: 1mm\n",
			wantErr: []string{"line 5", `"1mm" is not a duration`}},
		{name: "a list is not a duration", file: "otp:\n  cooldown: [1s]\n",
			wantErr: []string{"line 2", "want a duration"}},
		{name: "bad number names its line", file: "otp:\n  per_phone: {limit: many}\n",
			wantErr: []string{`line 2: otp.per_phone.limit: want a whole number, got "many"`}},
		{name: "misspelt field", file: "otp:\n  per_phon: {limit: 3}\n",
			wantErr: []string{"line 2: otp.per_phon: unknown field (did you mean per_phone?)"}},
		{name: "misspelt field named by its path, not a Go type", file: "otp:\n  code_length: 6\n  cooldwon: 30s\n",
			wantErr: []string{"line 3: otp.cooldwon: unknown field (did you mean cooldown?)"}},
		{name: "misspelt field in a limit", file: "limits:\n  x: {algorithm: fixed_window, bogus: 1}\n",
			wantErr: []string{"limits.x.bogus: unknown field"}},
		{name: "misspelt section", file: "otpp:\n  cooldown: 30s\n", wantErr: []string{"line 1: otpp: unknown field (did you mean otp?)"}},
		{name: "a list item", file: "otp:\n  prefix_depths:\n    - {limit: 5, window: 1h, digits_droped: 3}\n",
			wantErr: []string{"line 3: otp.prefix_depths[0].digits_droped: unknown field (did you mean digits_dropped?)"}},
		{name: "a section where a list goes", file: "otp:\n  allowed_countries: {IN: true}\n",
			wantErr: []string{"line 2: otp.allowed_countries: want a list, got a section of keys"}},
		{name: "a word where a switch goes", file: "limits:\n  x: {algorithm: fixed_window, limit: 3, window: 1m, shadow: maybe}\n",
			wantErr: []string{`limits.x.shadow: want true or false, got "maybe"`}},
		{name: "every mistake at once", file: "otp:\n  cooldwon: 30s\n  budget: {per_huor: 5}\n",
			wantErr: []string{"otp.cooldwon", "otp.budget.per_huor: unknown field (did you mean per_hour?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodePolicies([]byte(tc.file))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("got no error, want one naming %v", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
				if strings.Contains(err.Error(), "app.") || strings.Contains(err.Error(), "type ") {
					t.Errorf("error %q names a Go type", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := guard.DefaultPolicies()
			want.FillDefaults()
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadPoliciesRefusesWhatIsNotAFile: the policy file is read only when
// it is a regular file (a link to one is fine) of at most maxConfigFile
// bytes; a FIFO must not block the reader, nor /dev/zero fill memory.
func TestLoadPoliciesRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("otp:\n  per_phone: {limit: 9}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	zero := filepath.Join(dir, "zero.yaml")
	fifo := filepath.Join(dir, "fifo.yaml")
	big := filepath.Join(dir, "big.yaml")
	for _, err := range []error{
		os.Symlink(good, link), os.Symlink("/dev/zero", zero), syscall.Mkfifo(fifo, 0o600),
		os.WriteFile(big, []byte("otp:\n  message: \""+strings.Repeat("x", maxConfigFile)+"\"\n"), 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path, wantErr string
	}{
		{name: "a link to a regular file", path: link},
		{name: "a link to /dev/zero", path: zero, wantErr: "not a regular file"},
		{name: "a FIFO", path: fifo, wantErr: "not a regular file"},
		{name: "a directory", path: dir, wantErr: "not a regular file"},
		{name: "too big", path: big, wantErr: "larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := LoadPolicies(tc.path); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("loadPolicies blocked")
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LoadPolicies(%s) = %v, want an error saying %q", tc.name, err, tc.wantErr)
			}
		})
	}
}
