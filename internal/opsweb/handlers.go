// Package opsweb owns the ops desk's HTTP side: the JSON handlers of
// /ops/..., the ops page with its forms, templates and script, and the ops
// sign-in (sessions, CSRF, the ops-key middleware). The desk's rules live
// in internal/ops; httpapi registers these handlers in its one list of
// routes.
package opsweb

import (
	"log/slog"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
)

// Options are the ops desk handlers' dependencies.
type Options struct {
	// Ops is the ops desk; nil answers the routes that need it with 503.
	Ops *ops.Desk
	// Abuse reads the attack view (GET /ops/abuse, the top of /ops); nil:
	// /ops/abuse is 404 and the page leaves the section out.
	Abuse  *ops.AbuseDesk
	Logger *slog.Logger
	// APIKeys and OpsKeys: an ops key signs in; an API key is recognised
	// and refused with 403.
	APIKeys, OpsKeys httpx.Keyring
	// SessionKey signs ops sessions; every instance needs the same one.
	// Empty: a random key, so sessions work on this instance only.
	SessionKey []byte
	// Sessions keeps the sessions signed out before they expire, for
	// every instance; nil: signing out only clears the cookie.
	Sessions SessionStore
	// SignIn limits wrong ops keys per address (ops.SignInLimiter.Admit).
	SignIn *ops.SignInLimiter
	// State is this instance's health for the attack view; nil: "ok".
	State func() State
	// Trust imports trusted numbers (POST /ops/trusted-numbers): the OTP
	// service in force; nil: 404.
	Trust func() TrustImporter
}

// Handlers are the ops desk's HTTP handlers and its sign-in middleware.
type Handlers struct {
	ops              *ops.Desk
	abuse            *ops.AbuseDesk
	log              *slog.Logger
	apiKeys, opsKeys httpx.Keyring
	sessions         sessions
	revoked          SessionStore
	signInLimit      *ops.SignInLimiter
	state            func() State
	trust            func() TrustImporter
}

// New builds the handlers.
func New(o Options) *Handlers {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SignIn == nil {
		o.SignIn = ops.NewSignInLimiter(nil, ops.SignInLimit{})
	}
	return &Handlers{
		ops: o.Ops, abuse: o.Abuse, log: o.Logger, apiKeys: o.APIKeys, opsKeys: o.OpsKeys,
		sessions: newSessions(o.SessionKey, o.OpsKeys), revoked: o.Sessions, signInLimit: o.SignIn, state: o.State,
		trust: o.Trust,
	}
}
