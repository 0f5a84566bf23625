// Package verifyapi answers Twilio Verify v2's routes for SMS, so that an
// app written against Verify switches to otpguard by pointing its SDK's
// HTTP client at it (docs/verify.md): services (the policy file's
// services:, guard/service.go) as tenants with HTTP Basic credentials,
// form-encoded parameters read strictly, Verify's JSON and error bodies.
// Every send and check goes through the same OTP rules as /otp/send and
// /otp/verify (guard.OTP), with the service as the owner of its
// verifications. The routes are registered with the rest in
// httpapi.routes(); handlers are thin: read the form, call guard, answer.
package verifyapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/problem"
)

// paramChallenge is otpguard's one parameter beyond Verify's: the
// solution of the challenge a 428001 answered (docs/verify.md).
const paramChallenge = "OtpguardChallenge"

// State is what one request works with, loaded once: the OTP service and
// the services of the policy in force.
type State struct {
	OTP     *guard.OTP
	Tenants *Tenants
}

// Lockout decides a credential of the caller's address: a wrong one is
// counted, and an address that has spent its wrong ones is refused
// (ops.SignInLimiter, the API keys' limiter); last says this one spent
// the last.
type Lockout interface {
	Admit(ctx context.Context, ip string, good bool) (last bool, err error)
}

// Options are the handlers' dependencies.
type Options struct {
	State   func() State
	Metrics *metrics.Set
	Lockout Lockout
	// LockedOut is told of the wrong credential that spent an address's
	// last (to log and audit it as the API keys' are).
	LockedOut func(c echo.Context, ip string)
	Logger    *slog.Logger
	Now       func() time.Time // nil: time.Now
}

// Handlers are the Verify routes' handlers and middleware.
type Handlers struct {
	state     func() State
	metrics   *metrics.Set
	lockout   Lockout
	lockedOut func(c echo.Context, ip string)
	log       *slog.Logger
	now       func() time.Time
}

// New builds the handlers.
func New(o Options) *Handlers {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Handlers{state: o.State, metrics: o.Metrics, lockout: o.Lockout, lockedOut: o.LockedOut, log: o.Logger, now: o.Now}
}

// The request's state and tenant, set by Authenticate.
const (
	stateKey  = "verifyapi.state"
	tenantKey = "verifyapi.tenant"
)

// Authenticate admits a request whose HTTP Basic credential is one of the
// URL's service's ({ServiceSid}, or {Sid} on the service's own route). No
// credential, or one of no service, is 401 20003 (counted against the
// address as the API keys' are); a service's credential on another
// service's route is 404 20404, as if that service did not exist.
func (h *Handlers) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		user, pass, ok := c.Request().BasicAuth()
		if !ok {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="otpguard"`)
			return problem.Errorf(problem.CodeUnauthorized, "send HTTP Basic credentials of the service")
		}
		st := h.state()
		sid := c.Param("ServiceSid")
		if sid == "" {
			sid = c.Param("Sid")
		}
		tenant, good := st.Tenants.authenticate(sid, user, pass)
		ip := c.RealIP()
		last, err := h.lockout.Admit(c.Request().Context(), ip, good)
		if err != nil {
			return lockedOutError(err)
		}
		if last && h.lockedOut != nil {
			h.lockedOut(c, ip)
		}
		switch {
		case !good:
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Basic realm="otpguard"`)
			return problem.Errorf(problem.CodeUnauthorized, "the credentials are not valid")
		case tenant == nil:
			return problem.Errorf(problem.CodeNotFound, "the requested resource was not found")
		}
		c.Set(stateKey, st)
		c.Set(tenantKey, tenant)
		return next(c)
	}
}

// lockedOutError is the limiter's refusal of an address that has spent
// its wrong credentials as Verify's 20429: its too_many_attempts would
// read as 60202, a code's spent guesses.
func lockedOutError(err error) error {
	var pe *problem.Error
	if errors.As(err, &pe) && pe.Code == problem.CodeTooManyAttempts {
		return &problem.Error{Code: problem.CodeRateLimited, Message: pe.Message, RetryAfter: pe.RetryAfter, Err: err}
	}
	return err
}

func requestOf(c echo.Context) (State, *Tenant) {
	st, _ := c.Get(stateKey).(State)
	t, _ := c.Get(tenantKey).(*Tenant)
	return st, t
}

// base is the scheme and host the request came to, for the answers' url.
func base(c echo.Context) string { return c.Scheme() + "://" + c.Request().Host }

// CreateVerification: POST /v2/Services/{ServiceSid}/Verifications. Sends
// a code to To by SMS within every otpguard limit (guard.OTP.Send, as POST
// /otp/send); DeviceIp is the user's address (the per-address limit);
// Locale the language of the text, one of Verify's locales (else 60200,
// before anything is counted), else the number's country's; the answer's
// locale says which was sent. Channel whatsapp or call is sent by that
// channel when this deployment offers it, else 60200 saying it is off; a
// channel the service's own policy leaves out (its otp.channels) is 60200
// too. The code, its text and its limits are the service's policy's
// (guard/servicepolicy.go).
func (h *Handlers) CreateVerification(c echo.Context) error {
	f, err := readForm(c, "To", "Channel", "Locale", "DeviceIp", paramChallenge)
	if err != nil {
		return err
	}
	switch ch := f["Channel"]; {
	case f["To"] == "":
		return invalidParameter("missing required parameter To")
	case ch == "":
		return invalidParameter("missing required parameter Channel")
	case ch == guard.ChannelWhatsApp || ch == guard.ChannelCall:
		if !requestState(c).OTP.Offers(ch) {
			return invalidParameter("Channel " + ch + " is off on this otpguard (its sender is not configured): use sms")
		}
	case ch != guard.ChannelSMS:
		return invalidParameter("invalid parameter Channel: " + ch)
	}
	if l := f["Locale"]; l != "" {
		if _, ok := guard.CanonicalLocale(l); !ok {
			return guard.LocaleProblem("Locale", l)
		}
	}
	st, t := requestOf(c)
	res, err := st.OTP.Send(c.Request().Context(), guard.SendRequest{Phone: f["To"], ClientIP: f["DeviceIp"],
		Challenge: f[paramChallenge], Service: t.Owner, Locale: f["Locale"], Channel: f["Channel"]})
	httpx.LogPhone(c, res.Phone.E164)
	h.metrics.Send(t.Owner, res.Phone.Region, err)
	if err != nil {
		return err
	}
	now := h.now()
	v := guard.Verification{ID: res.VerificationID, Phone: res.Phone.E164, Status: guard.StatusPending,
		CreatedAt: now, UpdatedAt: now, Channel: res.Channel}
	out := newVerification(t, v, base(c))
	out.Locale = res.Locale
	return c.JSON(http.StatusCreated, out)
}

// FetchVerification: GET /v2/Services/{ServiceSid}/Verifications/{Sid}.
func (h *Handlers) FetchVerification(c echo.Context) error {
	if _, err := readForm(c); err != nil {
		return err
	}
	st, t := requestOf(c)
	v, err := st.OTP.Verification(c.Request().Context(), t.Owner, c.Param("Sid"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newVerification(t, v, base(c)))
}

// UpdateVerification: POST /v2/Services/{ServiceSid}/Verifications/{Sid}.
// Status canceled kills the pending code (as POST
// /otp/verifications/{id}/cancel); approved approves it without a code.
// A verification no longer pending is 404 20404, as on Verify.
func (h *Handlers) UpdateVerification(c echo.Context) error {
	f, err := readForm(c, "Status")
	if err != nil {
		return err
	}
	st, t := requestOf(c)
	ctx, sid := c.Request().Context(), c.Param("Sid")
	var v guard.Verification
	switch f["Status"] {
	case string(guard.StatusCanceled):
		v, err = st.OTP.CancelVerification(ctx, t.Owner, sid)
	case string(guard.StatusApproved):
		v, err = st.OTP.ApproveVerification(ctx, t.Owner, sid)
	case "":
		return invalidParameter("missing required parameter Status")
	default:
		return invalidParameter("invalid parameter Status: want canceled or approved")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newVerification(t, v, base(c)))
}

// FetchService: GET /v2/Services/{Sid}. The service the credential acts
// for; its code_length is its own policy's.
func (h *Handlers) FetchService(c echo.Context) error {
	if _, err := readForm(c); err != nil {
		return err
	}
	st, t := requestOf(c)
	return c.JSON(http.StatusOK, newService(t, st.OTP.CodeLength(t.Owner), base(c)))
}

// requestState is the request's State.
func requestState(c echo.Context) State {
	st, _ := requestOf(c)
	return st
}
