// Package opsweb owns the ops desk's HTTP side: the JSON handlers of
// /ops/..., the ops page with its forms, templates and script, and the ops
// sign-in (sessions, CSRF, the ops-key middleware). The desk's rules live
// in internal/ops; httpapi registers these handlers in its one list of
// routes.
package opsweb

import (
	"log/slog"

	"github.com/otpguard/otpguard/internal/guard"
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
	// Risk clears numbers' cached risk scores (DELETE /ops/risk/{phone}):
	// the OTP service in force; nil: 404.
	Risk func() RiskClearer
	// Numbers reads what the OTP rules hold of a number for the desk's
	// look-up (GET /ops/numbers/{phone}, the page's search): the OTP
	// service in force; nil: the look-up answers without it.
	Numbers func() ops.NumberInspector
	// Services lists the Verify services in force (GET /ops/services,
	// the page's services); nil: the default service alone.
	Services func() []guard.Service
}

// Handlers are the ops desk's HTTP handlers, in three rooms: the sign-in
// and its middleware, the JSON API of /ops/..., and the page with its
// forms.
type Handlers struct {
	SignIn *SignIn
	API    *API
	Pages  *Pages
}

// SignIn is the ops sign-in: the middleware that admits an ops key or
// session (signin.go), the sign-in form and signing out.
type SignIn struct {
	ops              *ops.Desk // nil: every ops route answers 503
	log              *slog.Logger
	apiKeys, opsKeys httpx.Keyring
	sessions         sessions
	revoked          SessionStore
	signInLimit      *ops.SignInLimiter
}

// API is the JSON handlers of /ops/... (api.go, overrides.go, abuse.go,
// trusted.go, risk.go, services.go).
type API struct {
	ops      *ops.Desk
	view     *attackView
	trust    func() TrustImporter
	risk     func() RiskClearer
	numbers  func() ops.NumberInspector
	services func() []guard.Service
}

// Pages is the ops page and its forms (page.go, forms.go,
// overrides_page.go).
type Pages struct {
	ops      *ops.Desk
	view     *attackView
	sessions sessions // the page's CSRF token
	risk     func() RiskClearer
	trust    func() TrustImporter
	numbers  func() ops.NumberInspector
	services func() []guard.Service
	log      *slog.Logger
}

// New builds the handlers.
func New(o Options) *Handlers {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SignIn == nil {
		o.SignIn = ops.NewSignInLimiter(nil, ops.SignInLimit{})
	}
	ss := newSessions(o.SessionKey, o.OpsKeys)
	view := &attackView{abuse: o.Abuse, ops: o.Ops, state: o.State}
	return &Handlers{
		SignIn: &SignIn{ops: o.Ops, log: o.Logger, apiKeys: o.APIKeys, opsKeys: o.OpsKeys, sessions: ss,
			revoked: o.Sessions, signInLimit: o.SignIn},
		API: &API{ops: o.Ops, view: view, trust: o.Trust, risk: o.Risk, numbers: o.Numbers, services: o.Services},
		Pages: &Pages{ops: o.Ops, view: view, sessions: ss, risk: o.Risk, trust: o.Trust, numbers: o.Numbers,
			services: o.Services, log: o.Logger},
	}
}
