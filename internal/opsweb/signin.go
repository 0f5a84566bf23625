package opsweb

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// SessionStore keeps the ops sessions signed out before they expire,
// shared by every instance (ops.SignOuts: durably in SQL, cached in each
// instance, and in Redis for an immediate effect).
type SessionStore interface {
	RevokeSession(ctx context.Context, id string, until time.Time) error
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

// sessionCheckTimeout bounds the look-up of a signed-out session.
const sessionCheckTimeout = 500 * time.Millisecond

// signedOut reports whether token was signed out. When the store cannot
// say (a sign-out not in this instance's cache yet, and Redis down), the
// session is let in (logged): the ops page is most needed during a Redis
// outage, and the token is still signed and expires in hours.
func (s *SignIn) signedOut(c echo.Context, token string) bool {
	if s.revoked == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), sessionCheckTimeout)
	defer cancel()
	out, err := s.revoked.SessionRevoked(ctx, s.sessions.id(token))
	if err != nil {
		s.log.WarnContext(ctx, "could not check whether an ops session was signed out; letting it in", "err", err)
		return false
	}
	return out
}

// RequireOps admits an ops key (Authorization: Bearer) or an ops session.
// An API key is refused with 403. With a session, a state-changing request
// needs the CSRF token (header, or form field on page routes).
//
// page routes (the HTML page and its forms) send a request with no
// credentials to the sign-in form; API routes answer it with 401.
func (s *SignIn) RequireOps(page bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if token, ok := httpx.Bearer(c); ok {
				if err := s.opsBearer(c, token); err != nil {
					return err
				}
				return s.opsReady(next, c)
			}
			if ck, err := c.Cookie(SessionCookie); err == nil {
				if actor, ok := s.sessions.verify(ck.Value); ok && !s.signedOut(c, ck.Value) {
					if unsafeMethod(c.Request().Method) {
						got := c.Request().Header.Get(csrfHeader)
						if got == "" && page {
							got = c.Request().PostFormValue(csrfField)
						}
						if !s.sessions.csrfOK(ck.Value, got) {
							return problem.Errorf(problem.CodeForbidden, "missing or wrong CSRF token; reload the ops page")
						}
					}
					c.Set(ctxActor, actor)
					c.Set(ctxSession, ck.Value)
					return s.opsReady(next, c)
				}
			}
			if page {
				return c.Redirect(http.StatusSeeOther, "/ops/login")
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
			return problem.Errorf(problem.CodeUnauthorized, "send Authorization: Bearer <ops key>, or sign in at /ops/login")
		}
	}
}

// RequireOpsKey admits an ops key (Authorization: Bearer) only, through
// the same sign-in limiter and audit as RequireOps; it needs no ops desk
// (GET /ops/status reads no SQL).
func (s *SignIn) RequireOpsKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, ok := httpx.Bearer(c)
		if !ok {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
			return problem.Errorf(problem.CodeUnauthorized, "send Authorization: Bearer <ops key>")
		}
		if err := s.opsBearer(c, token); err != nil {
			return err
		}
		return next(c)
	}
}

// opsBearer decides an ops key sent as a bearer: through the sign-in
// limiter of the caller's address before its outcome is acted on, a wrong
// one audited as a failed sign-in. An API key is 403 and not a failure.
// On success the actor is set on c.
func (s *SignIn) opsBearer(c echo.Context, token string) error {
	actor, ok := s.opsKeys.Actor(token)
	apiKey := s.apiKeys.Holds(token)
	if err := s.admitSignIn(c, ok || apiKey); err != nil {
		return err
	}
	switch {
	case ok:
		c.Set(ctxActor, actor)
		return nil
	case apiKey:
		return problem.Errorf(problem.CodeForbidden, "this route needs an ops key, not an API key")
	}
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard", error="invalid_token"`)
	return problem.Errorf(problem.CodeUnauthorized, "the bearer key is not valid")
}

// admitSignIn puts an ops key already compared (ok: right, or a key of
// the other kind) to the sign-in limiter of the caller's address
// (ops.SignInLimiter.Admit), and audits a wrong one that was let through
// to be refused as a failed sign-in.
func (s *SignIn) admitSignIn(c echo.Context, ok bool) error {
	ip := c.RealIP()
	if _, err := s.signInLimit.Admit(c.Request().Context(), ip, ok); err != nil {
		return err
	}
	if !ok && s.ops != nil {
		s.ops.RecordLogin(httpx.AuditContext(c), "", ip, false)
	}
	return nil
}

// opsReady refuses ops requests on a server built without the ops desk,
// and bounds the database work of the others as a whole (ops.Desk.Request).
func (s *SignIn) opsReady(next echo.HandlerFunc, c echo.Context) error {
	if s.ops == nil {
		return &problem.Error{Code: problem.CodeStoreUnavailable, Message: "ops is not configured on this server", RetryAfter: time.Minute}
	}
	c.SetRequest(c.Request().WithContext(s.ops.Request(c.Request().Context())))
	return next(c)
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

func actorFrom(c echo.Context) string {
	a, _ := c.Get(ctxActor).(string)
	return a
}

// LoginForm: GET /ops/login. The sign-in form.
func (s *SignIn) LoginForm(c echo.Context) error {
	return render(c, http.StatusOK, "login.html", loginData{})
}

type loginData struct{ Error string }

// Login: POST /ops/login. Trades the ops key (form field key) for a session
// cookie and goes to the ops page.
func (s *SignIn) Login(c echo.Context) error {
	// The body only: a key in the query string would sit in proxies' logs.
	key := strings.TrimSpace(c.Request().PostFormValue("key"))
	actor, ok := s.opsKeys.Actor(key)
	apiKey := key != "" && s.apiKeys.Holds(key)
	if err := s.admitSignIn(c, ok || apiKey); err != nil {
		var ge *problem.Error
		if errors.As(err, &ge) && ge.Code == problem.CodeTooManyAttempts {
			c.Response().Header().Set("Retry-After", strconv.Itoa(httpx.RetrySeconds(ge.RetryAfter)))
			return render(c, http.StatusTooManyRequests, "login.html", loginData{Error: ge.Message})
		}
		return err
	}
	if !ok {
		if apiKey { // the wrong kind of key: not a guess, but audited like every sign-in
			if s.ops != nil {
				s.ops.RecordLogin(httpx.AuditContext(c), "", c.RealIP(), false)
			}
			return render(c, http.StatusForbidden, "login.html", loginData{Error: "That is an API key. The ops page needs an ops key (OTPGUARD_OPS_KEYS)."})
		}
		return render(c, http.StatusUnauthorized, "login.html", loginData{Error: "That is not an ops key."})
	}
	token, exp := s.sessions.issue(actor)
	c.SetCookie(&http.Cookie{
		Name: SessionCookie, Value: token, Path: "/ops", Expires: exp, MaxAge: int(s.sessions.ttl.Seconds()),
		HttpOnly: true, Secure: c.Scheme() == "https", SameSite: http.SameSiteStrictMode,
	})
	if s.ops != nil {
		s.ops.RecordLogin(httpx.AuditContext(c), actor, c.RealIP(), true)
	}
	return c.Redirect(http.StatusSeeOther, "/ops")
}

// Logout: POST /ops/logout. Signs the session out on every instance (the
// token is kept as revoked in the SQL store, and in Redis, until it would
// have expired) and clears the cookie.
func (s *SignIn) Logout(c echo.Context) error {
	if token, ok := c.Get(ctxSession).(string); ok && s.revoked != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), sessionCheckTimeout)
		defer cancel()
		if err := s.revoked.RevokeSession(ctx, s.sessions.id(token), s.sessions.expiry(token)); err != nil {
			// Refuse rather than pretend: the cookie would be gone here, the
			// token still good everywhere.
			// The sign-out must reach the SQL store to outlive Redis.
			return &problem.Error{Code: problem.CodeDatabaseUnavailable, Message: "could not sign the session out; try again",
				RetryAfter: 5 * time.Second, Err: err}
		}
	}
	c.SetCookie(&http.Cookie{
		Name: SessionCookie, Value: "", Path: "/ops", MaxAge: -1,
		HttpOnly: true, Secure: c.Scheme() == "https", SameSite: http.SameSiteStrictMode,
	})
	return c.Redirect(http.StatusSeeOther, "/ops/login")
}
