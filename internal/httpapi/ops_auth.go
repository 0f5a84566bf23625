package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
)

// The ops sign-in: a browser trades the ops key for a session cookie
// holding a signed, expiring token (never the key). Every state-changing
// request made with the cookie must also carry a CSRF token derived from
// the session, as a form field or the X-CSRF-Token header; SameSite=Strict
// keeps the cookie off cross-site requests besides.
const (
	sessionCookie = "otpguard_ops"
	csrfField     = "csrf_token"
	csrfHeader    = "X-CSRF-Token"
	// SessionTTL is how long an ops sign-in lasts.
	SessionTTL = 8 * time.Hour
)

// Context keys set by requireOps.
const (
	ctxActor   = "ops.actor"
	ctxSession = "ops.session"
)

// sessions issues and checks session tokens: base64(payload) "."
// base64(HMAC-SHA256(key, payload)), payload "actor|expiry unix|nonce".
// The key is shared by every instance (it is derived from the HMAC key),
// so that a session works on whichever instance the balancer picks.
type sessions struct {
	key []byte
	ops httpx.Keyring
	now func() time.Time
	ttl time.Duration
}

func (s sessions) mac(kind, msg string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// issue returns a new token for actor and when it expires.
func (s sessions) issue(actor string) (string, time.Time) {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	exp := s.now().Add(s.ttl).Truncate(time.Second)
	payload := actor + "|" + strconv.FormatInt(exp.Unix(), 10) + "|" + hex.EncodeToString(nonce)
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(s.mac("session", payload)), exp
}

// verify returns the actor of a valid, unexpired token whose key is still
// configured.
func (s sessions) verify(token string) (string, bool) {
	p64, sig64, ok := strings.Cut(token, ".")
	if !ok || len(token) > 512 {
		return "", false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	sig, err2 := enc.DecodeString(sig64)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, s.mac("session", string(payload))) {
		return "", false
	}
	parts := strings.Split(string(payload), "|")
	if len(parts) != 3 {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !s.now().Before(time.Unix(exp, 0)) || !s.ops.HasActor(parts[0]) {
		return "", false
	}
	return parts[0], true
}

// id names a token in the store of signed-out sessions (never the token:
// whoever reads Redis must not be able to sign in with it).
func (s sessions) id(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:16])
}

// expiry is when a token verify accepted expires.
func (s sessions) expiry(token string) time.Time {
	p64, _, _ := strings.Cut(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	parts := strings.Split(string(payload), "|")
	if len(parts) != 3 {
		return s.now().Add(s.ttl)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return s.now().Add(s.ttl)
	}
	return time.Unix(exp, 0)
}

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
func (s *Server) signedOut(c echo.Context, token string) bool {
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

// csrf is the CSRF token of a session: only a page served to the session's
// holder knows it.
func (s sessions) csrf(token string) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", token))
}

func (s sessions) csrfOK(token, got string) bool {
	return got != "" && hmac.Equal([]byte(got), []byte(s.csrf(token)))
}

func newSessions(key []byte, ops httpx.Keyring) sessions {
	if len(key) == 0 {
		// No shared key: sessions work on this instance only.
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	return sessions{key: key, ops: ops, now: time.Now, ttl: SessionTTL}
}

// requireOps admits an ops key (Authorization: Bearer) or an ops session.
// An API key is refused with 403. With a session, a state-changing request
// needs the CSRF token (header, or form field on page routes).
//
// page routes (the HTML page and its forms) send a request with no
// credentials to the sign-in form; API routes answer it with 401.
func (s *Server) requireOps(apiKeys, opsKeys httpx.Keyring, page bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if token, ok := httpx.Bearer(c); ok {
				if err := s.opsBearer(c, token, apiKeys, opsKeys); err != nil {
					return err
				}
				return s.opsReady(next, c)
			}
			if ck, err := c.Cookie(sessionCookie); err == nil {
				if actor, ok := s.sessions.verify(ck.Value); ok && !s.signedOut(c, ck.Value) {
					if unsafeMethod(c.Request().Method) {
						got := c.Request().Header.Get(csrfHeader)
						if got == "" && page {
							got = c.Request().PostFormValue(csrfField)
						}
						if !s.sessions.csrfOK(ck.Value, got) {
							return guard.Errorf(guard.CodeForbidden, "missing or wrong CSRF token; reload the ops page")
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
			return guard.Errorf(guard.CodeUnauthorized, "send Authorization: Bearer <ops key>, or sign in at /ops/login")
		}
	}
}

// requireOpsKey admits an ops key (Authorization: Bearer) only, through
// the same sign-in limiter and audit as requireOps; it needs no ops desk
// (GET /ops/status reads no SQL).
func (s *Server) requireOpsKey(apiKeys, opsKeys httpx.Keyring) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, ok := httpx.Bearer(c)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
				return guard.Errorf(guard.CodeUnauthorized, "send Authorization: Bearer <ops key>")
			}
			if err := s.opsBearer(c, token, apiKeys, opsKeys); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// opsBearer decides an ops key sent as a bearer: through the sign-in
// limiter of the caller's address before its outcome is acted on, a wrong
// one audited as a failed sign-in. An API key is 403 and not a failure.
// On success the actor is set on c.
func (s *Server) opsBearer(c echo.Context, token string, apiKeys, opsKeys httpx.Keyring) error {
	actor, ok := opsKeys.Actor(token)
	apiKey := apiKeys.Holds(token)
	if err := s.admitSignIn(c, ok || apiKey); err != nil {
		return err
	}
	switch {
	case ok:
		c.Set(ctxActor, actor)
		return nil
	case apiKey:
		return guard.Errorf(guard.CodeForbidden, "this route needs an ops key, not an API key")
	}
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard", error="invalid_token"`)
	return guard.Errorf(guard.CodeUnauthorized, "the bearer key is not valid")
}

// admitSignIn puts an ops key already compared (ok: right, or a key of
// the other kind) to the sign-in limiter of the caller's address
// (ops.SignInLimiter.Admit), and audits a wrong one that was let through
// to be refused as a failed sign-in.
func (s *Server) admitSignIn(c echo.Context, ok bool) error {
	ip := c.RealIP()
	if _, err := s.signInLimit.Admit(c.Request().Context(), ip, ok); err != nil {
		return err
	}
	if !ok && s.ops != nil {
		s.ops.RecordLogin(httpx.AuditContext(c), "", ip, false)
	}
	return nil
}

// opsReady refuses ops requests on a server built without the ops desk.
func (s *Server) opsReady(next echo.HandlerFunc, c echo.Context) error {
	if s.ops == nil {
		return &guard.Error{Code: guard.CodeStoreUnavailable, Message: "ops is not configured on this server", RetryAfter: time.Minute}
	}
	return next(c)
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

func actorFrom(c echo.Context) string {
	a, _ := c.Get(ctxActor).(string)
	return a
}

// loginForm: GET /ops/login. The sign-in form.
func (s *Server) loginForm(c echo.Context) error {
	return s.render(c, http.StatusOK, "login.html", loginData{})
}

type loginData struct{ Error string }

// login: POST /ops/login. Trades the ops key (form field key) for a session
// cookie and goes to the ops page.
func (s *Server) login(apiKeys, opsKeys httpx.Keyring) echo.HandlerFunc {
	return func(c echo.Context) error { return s.signIn(c, apiKeys, opsKeys) }
}

func (s *Server) signIn(c echo.Context, apiKeys, opsKeys httpx.Keyring) error {
	// The body only: a key in the query string would sit in proxies' logs.
	key := strings.TrimSpace(c.Request().PostFormValue("key"))
	actor, ok := opsKeys.Actor(key)
	apiKey := key != "" && apiKeys.Holds(key)
	if err := s.admitSignIn(c, ok || apiKey); err != nil {
		var ge *guard.Error
		if errors.As(err, &ge) && ge.Code == guard.CodeTooManyAttempts {
			c.Response().Header().Set("Retry-After", strconv.Itoa(httpx.RetrySeconds(ge.RetryAfter)))
			return s.render(c, http.StatusTooManyRequests, "login.html", loginData{Error: ge.Message})
		}
		return err
	}
	if !ok {
		if apiKey { // the wrong kind of key: not a guess, but audited like every sign-in
			if s.ops != nil {
				s.ops.RecordLogin(httpx.AuditContext(c), "", c.RealIP(), false)
			}
			return s.render(c, http.StatusForbidden, "login.html", loginData{Error: "That is an API key. The ops page needs an ops key (OTPGUARD_OPS_KEYS)."})
		}
		return s.render(c, http.StatusUnauthorized, "login.html", loginData{Error: "That is not an ops key."})
	}
	token, exp := s.sessions.issue(actor)
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: token, Path: "/ops", Expires: exp, MaxAge: int(s.sessions.ttl.Seconds()),
		HttpOnly: true, Secure: c.Scheme() == "https", SameSite: http.SameSiteStrictMode,
	})
	if s.ops != nil {
		s.ops.RecordLogin(httpx.AuditContext(c), actor, c.RealIP(), true)
	}
	return c.Redirect(http.StatusSeeOther, "/ops")
}

// logout: POST /ops/logout. Signs the session out on every instance (the
// token is kept as revoked in the SQL store, and in Redis, until it would
// have expired) and clears the cookie.
func (s *Server) logout(c echo.Context) error {
	if token, ok := c.Get(ctxSession).(string); ok && s.revoked != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), sessionCheckTimeout)
		defer cancel()
		if err := s.revoked.RevokeSession(ctx, s.sessions.id(token), s.sessions.expiry(token)); err != nil {
			// Refuse rather than pretend: the cookie would be gone here, the
			// token still good everywhere.
			// The sign-out must reach the SQL store to outlive Redis.
			return &guard.Error{Code: guard.CodeDatabaseUnavailable, Message: "could not sign the session out; try again",
				RetryAfter: 5 * time.Second, Err: err}
		}
	}
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: "", Path: "/ops", MaxAge: -1,
		HttpOnly: true, Secure: c.Scheme() == "https", SameSite: http.SameSiteStrictMode,
	})
	return c.Redirect(http.StatusSeeOther, "/ops/login")
}
