package guard

import (
	"errors"
	"fmt"
)

// Services are tenants of one deployment (the policy file's services:
// section): each owns the verifications its sends create, and a
// credential of one cannot read, check, cancel or approve another's. A
// service is named by a Twilio Verify service SID ("VA" and 32 hex
// digits) and reached through the Verify v2-compatible routes.
//
// The default service is the deployment's own: the API keys of /otp/...
// (OTPGUARD_API_KEYS) act for it, and every verification made before
// services existed is its. Its owner tag is "" (DefaultService). A service
// of the file marked default is that same tenant reached through the
// Verify routes too; the others are tenants of their own.
//
// A number has one live code per service (Codes): a service's send
// supersedes only its own earlier code, and its wrong guesses lock only
// its own code.
//
// A service other than the default may have a policy of its own, an
// overlay on the deployment's otp: policy (servicepolicy.go), and counts
// its limits and automatic rules in rooms of its own (room.go): one
// service's attacker spends none of another's users' room. Its rows in
// metrics (the service label of the OTP decisions) and in the attack view
// (ops/abuse_services.go) are its own.

// DefaultService is the owner tag of the default service's verifications.
const DefaultService = ""

// DefaultServiceLabel names the default service where a name must not be
// empty: the metrics' service label, the attack view's service rows.
const DefaultServiceLabel = "default"

// ServiceLabel is owner as metrics and the attack view name it: its SID,
// DefaultServiceLabel for the default service's "".
func ServiceLabel(owner string) string {
	if owner == DefaultService {
		return DefaultServiceLabel
	}
	return owner
}

// Service is one tenant of the policy file's services: section.
type Service struct {
	// SID is the Verify service SID the routes name ("VA" + 32 hex).
	SID string
	// FriendlyName is what GET /v2/Services/{Sid} answers.
	FriendlyName string
	// AccountSID ("AC" + 32 hex) is the account the answers name.
	AccountSID string
	// Default: this service is the deployment's default service (its
	// verifications are the /otp API's).
	Default bool
	// Credentials are the HTTP Basic credentials that act for it.
	Credentials []ServiceCredential
	// OTP is its overlay on the deployment's otp: policy
	// (servicepolicy.go); nil: the deployment's. The default service has
	// none: its sends are the /otp API's.
	OTP *ServicePolicy
}

// ServiceCredential is a Basic credential: an account SID ("AC") or API
// key SID ("SK") as user name, and its token or secret, read from
// SecretFile (never written in the policy file).
type ServiceCredential struct {
	SID        string
	SecretFile string
}

// Owner is the tag the service's verifications carry: "" for the default
// service, else its SID.
func (s Service) Owner() string {
	if s.Default {
		return DefaultService
	}
	return s.SID
}

// ValidSID reports whether sid is prefix and 32 hex digits, as Twilio
// writes SIDs.
func ValidSID(sid, prefix string) bool {
	if len(sid) != len(prefix)+32 || sid[:len(prefix)] != prefix {
		return false
	}
	for _, c := range sid[len(prefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// validateServices checks the services: section as a whole, each
// service's otp: block against the deployment's policy base.
func validateServices(services []Service, base OTPPolicy) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	seen := map[string]bool{}
	defaults := 0
	for i, s := range services {
		where := fmt.Sprintf("services[%d]", i)
		if !ValidSID(s.SID, "VA") {
			errs = append(errs, fmt.Errorf("%s.sid %q: want VA and 32 hex digits", where, s.SID))
		}
		if seen[s.SID] {
			errs = append(errs, fmt.Errorf("%s.sid %q: named twice", where, s.SID))
		}
		seen[s.SID] = true
		if !ValidSID(s.AccountSID, "AC") {
			errs = append(errs, fmt.Errorf("%s.account_sid %q: want AC and 32 hex digits", where, s.AccountSID))
		}
		if s.Default {
			defaults++
		}
		switch {
		case s.OTP != nil && s.Default:
			bad(where+".otp", "the default service keeps the deployment's otp: policy (its sends are the /otp API's): set it there, or give this service no default")
		case s.OTP != nil:
			validateServicePolicy(where, s.OTP, base, bad)
		}
		if len(s.Credentials) == 0 {
			errs = append(errs, fmt.Errorf("%s.credentials: at least one is needed", where))
		}
		for j, c := range s.Credentials {
			if !ValidSID(c.SID, "AC") && !ValidSID(c.SID, "SK") {
				errs = append(errs, fmt.Errorf("%s.credentials[%d].sid %q: want an account SID (AC...) or API key SID (SK...)", where, j, c.SID))
			}
			if c.SecretFile == "" {
				errs = append(errs, fmt.Errorf("%s.credentials[%d].secret_file: the file holding the token or secret is required", where, j))
			}
		}
	}
	if defaults > 1 {
		errs = append(errs, errors.New("services: at most one service may be the default"))
	}
	return errors.Join(errs...)
}
