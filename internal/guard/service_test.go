package guard_test

import (
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestValidateServices: the services: section's mistakes are refused,
// each named by its place in the file.
func TestValidateServices(t *testing.T) {
	const (
		va = "VA0123456789abcdef0123456789abcdef"
		ac = "AC0123456789abcdef0123456789abcdef"
		sk = "SK0123456789abcdef0123456789abcdef"
	)
	good := func() guard.Service {
		return guard.Service{SID: va, AccountSID: ac, Credentials: []guard.ServiceCredential{{SID: sk, SecretFile: "/s"}}}
	}
	for _, tc := range []struct {
		name     string
		services func() []guard.Service
		want     string // "" valid; else part of the error
	}{
		{"none", func() []guard.Service { return nil }, ""},
		{"one", func() []guard.Service { return []guard.Service{good()} }, ""},
		{"a short sid", func() []guard.Service { s := good(); s.SID = "VA01"; return []guard.Service{s} }, "services[0].sid"},
		{"an account sid as the service's", func() []guard.Service { s := good(); s.SID = ac; return []guard.Service{s} }, "services[0].sid"},
		{"no account sid", func() []guard.Service { s := good(); s.AccountSID = ""; return []guard.Service{s} }, "services[0].account_sid"},
		{"no credential", func() []guard.Service { s := good(); s.Credentials = nil; return []guard.Service{s} }, "services[0].credentials"},
		{"a credential of another kind", func() []guard.Service {
			s := good()
			s.Credentials[0].SID = va
			return []guard.Service{s}
		}, "services[0].credentials[0].sid"},
		{"no secret file", func() []guard.Service {
			s := good()
			s.Credentials[0].SecretFile = ""
			return []guard.Service{s}
		}, "secret_file"},
		{"a sid twice", func() []guard.Service { return []guard.Service{good(), good()} }, "named twice"},
		{"two defaults", func() []guard.Service {
			a, b := good(), good()
			b.SID = "VA0123456789abcdef0123456789abcdee"
			a.Default, b.Default = true, true
			return []guard.Service{a, b}
		}, "at most one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.Services = tc.services()
			err := p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
