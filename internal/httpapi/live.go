package httpapi

import (
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/verifyapi"
)

// Services are the policy-dependent parts of the server: built from one
// policy file, replaced together when the policy is reloaded (SetServices).
// A request loads them once (services) and uses that one set throughout,
// so no request ever sees half of a policy.
type Services struct {
	OTP     *guard.OTP
	Limiter *limit.Limiter
	// Tenants are the policy file's services, for the Verify routes
	// (internal/verifyapi); nil: none, every Verify request is 401.
	Tenants *verifyapi.Tenants
}

// SetServices puts sv in force for every request that starts afterwards;
// requests under way finish with the set they loaded.
func (s *Server) SetServices(sv Services) { s.live.Store(&sv) }

// services is the set in force: load it once per request.
func (s *Server) services() *Services { return s.live.Load() }

// PolicyFileStatus is the policy file's state, for GET /ops/status.
type PolicyFileStatus struct {
	Path     string    // "" when the embedded defaults are in force
	LoadedAt time.Time // when the policy in force was read
	// LastReload is the outcome of the last reload (zero At: none since
	// start-up); LastError its error when it failed, the old policy kept.
	LastReloadAt time.Time
	LastReloadOK bool
	LastError    string
	// Overrides is how many emergency overrides are in force here, and
	// OverridesLoadedAt when they were last loaded from the database.
	Overrides         int
	OverridesLoadedAt time.Time
}

type policyFileJSON struct {
	Path       string          `json:"path"`
	LoadedAt   *time.Time      `json:"loaded_at,omitempty"`
	LastReload *lastReloadJSON `json:"last_reload,omitempty"`
}

type lastReloadJSON struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"`
	Error  string    `json:"error,omitempty"`
}

type overridesStatusJSON struct {
	Active   int        `json:"active"`
	LoadedAt *time.Time `json:"loaded_at,omitempty"`
}

// policyFileStatus is the policy part of /ops/status; a failed last reload
// makes the instance "degraded" (it serves the old policy).
func policyFileStatus(p *PolicyFileStatus) (*policyFileJSON, *overridesStatusJSON, bool) {
	if p == nil {
		return nil, nil, false
	}
	f := &policyFileJSON{Path: p.Path, LoadedAt: timePtr(p.LoadedAt)}
	failed := false
	if !p.LastReloadAt.IsZero() {
		r := &lastReloadJSON{At: p.LastReloadAt.UTC(), Result: "ok"}
		if !p.LastReloadOK {
			r.Result, r.Error, failed = "error", p.LastError, true
		}
		f.LastReload = r
	}
	return f, &overridesStatusJSON{Active: p.Overrides, LoadedAt: timePtr(p.OverridesLoadedAt)}, failed
}
