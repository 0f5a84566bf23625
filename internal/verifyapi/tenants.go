package verifyapi

import (
	"bytes"
	"fmt"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
)

// Tenant is one service of the policy file as the routes know it: its
// SIDs, its owner tag (guard.Service.Owner) and its credentials, kept as
// digests of "SID:secret".
type Tenant struct {
	SID, FriendlyName, AccountSID string
	Owner                         string
	// Default: the service marked default (its Owner is "").
	Default bool
	// CredentialSIDs name its credentials, for the ops desk; their
	// secrets are only in keys, as digests.
	CredentialSIDs []string
	keys           httpx.Keyring
}

// Tenants are the services in force, replaced whole with the policy.
type Tenants struct {
	list []Tenant
}

// NewTenants builds the services of the policy file, reading each
// credential's secret with read (os.ReadFile; a trailing newline is not
// part of it). A file that cannot be read, or is empty, is an error: the
// policy is not put in force.
func NewTenants(services []guard.Service, read func(path string) ([]byte, error)) (*Tenants, error) {
	t := &Tenants{list: make([]Tenant, 0, len(services))}
	for _, s := range services {
		keys := make([]string, 0, len(s.Credentials))
		sids := make([]string, 0, len(s.Credentials))
		for _, c := range s.Credentials {
			sids = append(sids, c.SID)
			b, err := read(c.SecretFile)
			if err != nil {
				return nil, fmt.Errorf("verifyapi: service %s: credential %s: %w", s.SID, c.SID, err)
			}
			secret := string(bytes.TrimRight(b, "\r\n"))
			if secret == "" {
				return nil, fmt.Errorf("verifyapi: service %s: credential %s: %s is empty", s.SID, c.SID, c.SecretFile)
			}
			keys = append(keys, c.SID+":"+secret)
		}
		t.list = append(t.list, Tenant{SID: s.SID, FriendlyName: s.FriendlyName, AccountSID: s.AccountSID,
			Owner: s.Owner(), Default: s.Default, CredentialSIDs: sids, keys: httpx.NewKeyring(keys)})
	}
	return t, nil
}

// Services lists the services in force for the ops desk, in the policy
// file's order: each credential by its SID alone (no secret file, no
// secret, no digest). None when t is nil.
func (t *Tenants) Services() []guard.Service {
	if t == nil {
		return nil
	}
	out := make([]guard.Service, 0, len(t.list))
	for _, tn := range t.list {
		s := guard.Service{SID: tn.SID, FriendlyName: tn.FriendlyName, AccountSID: tn.AccountSID, Default: tn.Default}
		for _, sid := range tn.CredentialSIDs {
			s.Credentials = append(s.Credentials, guard.ServiceCredential{SID: sid})
		}
		out = append(out, s)
	}
	return out
}

// authenticate finds the tenant sid that the Basic credential user:pass
// acts for. good says whether the credential is any tenant's (a wrong one
// is counted against the caller's address); a good credential of another
// tenant finds none. Every tenant's keys are compared, in constant time
// each, whatever the answer.
func (t *Tenants) authenticate(sid, user, pass string) (tenant *Tenant, good bool) {
	if t == nil {
		return nil, false
	}
	key := user + ":" + pass
	for i := range t.list {
		if !t.list[i].keys.Holds(key) {
			continue
		}
		good = true
		if t.list[i].SID == sid {
			tenant = &t.list[i]
		}
	}
	return tenant, good
}
