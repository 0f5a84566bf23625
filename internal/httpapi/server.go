// Package httpapi owns otpguard's JSON API: the echo v4 server, its one
// list of routes (the ops desk's included, whose handlers are in opsweb),
// the middleware (request IDs, logging, API keys, admission, idempotency,
// tracing) and the handlers of /otp, /limits, /sms/status, /readyz and
// /ops/status. Handlers are thin: bind, validate, call guard, respond.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/opsweb"
	"github.com/otpguard/otpguard/internal/verifyapi"
)

// BodyLimit bounds every request body: the largest legitimate one, a full
// /limits/check batch, is a few kilobytes. 16 KiB, 16,384 bytes.
const BodyLimit = 16 << 10

// ImportBodyLimit bounds the body of POST /ops/trusted-numbers: its
// guard.MaxTrustImport numbers of up to 16 characters, quoted and comma
// separated, with room to spare. 512 KiB.
const ImportBodyLimit = 512 << 10

// importPath and importFormPath, the API's import and the page's, are
// the routes whose body may pass BodyLimit (up to ImportBodyLimit).
const (
	importPath     = "/ops/trusted-numbers"
	importFormPath = "/ops/actions/trust-import"
)

// Options are a server's dependencies.
type Options struct {
	OTP     *guard.OTP
	Limiter *limit.Limiter
	// Tenants are the policy file's services (the Verify routes); nil:
	// none.
	Tenants *verifyapi.Tenants
	APIKeys []string
	OpsKeys []string
	Logger  *slog.Logger
	// LogAllowedChecks: one allowed POST /limits/check in N gets its
	// request line at info, the others at debug (request_log.go); 0 or 1:
	// every one.
	LogAllowedChecks int
	Metrics          *metrics.Set
	// Ready reports whether the shared store answers (GET /readyz): an
	// error when no node answers; down names the Redis Cluster masters
	// that did not (none on one node), for the body of a 200.
	Ready func(ctx context.Context) (down []string, err error)
	// Spec is api/openapi.yaml, served at GET /openapi.yaml.
	Spec []byte
	// Status reports the shared store's health (GET /readyz, GET
	// /ops/status); nil: /readyz only pings, /ops/status is 404.
	Status func() StoreStatus
	// Ops is the ops desk behind /ops; nil answers /ops/* with 503.
	Ops *ops.Desk
	// SessionKey signs ops sessions; every instance needs the same one.
	// Empty: a random key, so sessions work on this instance only.
	SessionKey []byte
	// Sessions keeps the ops sessions signed out before they expire, for
	// every instance (ops.SignOuts); nil: signing out only clears the cookie.
	Sessions opsweb.SessionStore
	// StatusCallback checks POST /sms/status (smsstatus.go); nil: 404.
	StatusCallback StatusCallback
	// AbuseMetrics, when the OTP service's AbuseHooks feed them; nil:
	// registered here on Metrics.
	AbuseMetrics *metrics.Abuse
	// SignIn limits wrong ops keys (form or bearer, every route that takes
	// one) per address; APIKeyLimit wrong API keys. Both count in the
	// shared store; nil limits nothing.
	SignIn, APIKeyLimit *ops.SignInLimiter
	// TrustedProxies (OTPGUARD_TRUSTED_PROXIES) are the peers whose
	// X-Forwarded-For or X-Real-IP names the client; none: the peer
	// address is the client (clientip.go).
	TrustedProxies []netip.Prefix
	// MaxInFlight bounds the decisions (send, verify, check) worked on at
	// once; the excess is shed with 503 overloaded (admission.go). 0: no
	// bound.
	MaxInFlight int
	// Admission, when set, is the bound shared with the instance's other
	// transports (Envoy's gRPC), built on Metrics; it replaces MaxInFlight.
	Admission *Admission
	// Idempotency keeps the answers of requests sent with an
	// Idempotency-Key (idempotency.go); nil: the header is ignored.
	// IdempotencyWait bounds how long a request waits for the answer of
	// the same request running elsewhere (0: DefaultIdempotencyWait).
	Idempotency     IdempotencyStore
	IdempotencyWait time.Duration
	// Abuse reads the attack view (GET /ops/abuse, the top of /ops); nil:
	// /ops/abuse is 404 and the page leaves the section out.
	Abuse *ops.AbuseDesk
}

// Server is otpguard's HTTP handler.
type Server struct {
	echo *echo.Echo
	// live is the OTP service and limiter in force (live.go): replaced
	// whole when the policy is reloaded.
	live    atomic.Pointer[Services]
	log     *slog.Logger
	checks  checkSample // request_log.go
	metrics *metrics.Set
	spec    []byte
	health  health // status.go

	// The ops desk (a lock-out of API keys is audited there) and its
	// handlers and sign-in (internal/opsweb).
	ops  *ops.Desk
	desk *opsweb.Handlers
	// The limit on wrong API keys per address (auth.go).
	apiKeyLimit *ops.SignInLimiter

	admission   admission   // admission.go
	idempotency idempotency // idempotency.go

	// The handlers of /otp/..., /limits/check and /sms/status.
	otp    otpHandlers      // otp.go, verifications.go
	limits limitHandlers    // limits.go
	sms    smsStatusHandler // smsstatus.go
	// The Verify v2-compatible routes (internal/verifyapi).
	verify *verifyapi.Handlers
}

// New builds the server and registers every route.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	s := &Server{
		echo: echo.New(), log: o.Logger,
		metrics: o.Metrics, spec: o.Spec, health: health{ready: o.Ready, status: o.Status, log: o.Logger},
		ops: o.Ops, checks: newCheckSample(o.LogAllowedChecks),
	}
	apiKeys, opsKeys := httpx.NewKeyring(o.APIKeys), httpx.NewKeyring(o.OpsKeys)
	s.desk = opsweb.New(opsweb.Options{Ops: o.Ops, Abuse: o.Abuse, Logger: o.Logger, APIKeys: apiKeys, OpsKeys: opsKeys,
		SessionKey: o.SessionKey, Sessions: o.Sessions, SignIn: o.SignIn, State: s.health.instanceState,
		Trust: func() opsweb.TrustImporter { return s.services().OTP },
		Risk:  func() opsweb.RiskClearer { return s.services().OTP },
		Numbers: func() ops.NumberInspector {
			if otp := s.services().OTP; otp != nil {
				return otp
			}
			return nil // no typed nil: the look-up answers without it
		},
		Services: func() []guard.Service { return s.services().Tenants.Services() }})
	s.SetServices(Services{OTP: o.OTP, Limiter: o.Limiter, Tenants: o.Tenants})
	s.apiKeyLimit = o.APIKeyLimit
	if s.apiKeyLimit == nil {
		s.apiKeyLimit = ops.NewAPIKeyLimiter(nil, ops.SignInLimit{})
	}
	if o.Admission != nil {
		s.admission = o.Admission.a
	} else {
		s.admission = newAdmission(o.MaxInFlight, o.Metrics)
	}
	s.health.shed, s.health.shedAt = s.admission.shed, s.admission.shedAt
	s.idempotency = idempotency{store: o.Idempotency, wait: o.IdempotencyWait, log: o.Logger}
	if s.idempotency.wait <= 0 {
		s.idempotency.wait = DefaultIdempotencyWait
	}
	abuseMetrics := o.AbuseMetrics
	if abuseMetrics == nil {
		abuseMetrics = metrics.NewAbuse(o.Metrics)
	}
	s.otp = otpHandlers{live: &s.live, metrics: o.Metrics}
	s.limits = limitHandlers{live: &s.live, metrics: o.Metrics}
	s.sms = smsStatusHandler{live: &s.live, callback: o.StatusCallback, metrics: abuseMetrics}
	s.verify = verifyapi.New(verifyapi.Options{Metrics: o.Metrics, Lockout: s.apiKeyLimit, Logger: o.Logger,
		State: func() verifyapi.State {
			sv := s.services()
			return verifyapi.State{OTP: sv.OTP, Tenants: sv.Tenants}
		},
		LockedOut: s.lockedOut})
	s.echo.HideBanner = true
	// Forwarding headers are believed only from the trusted proxies
	// (clientip.go).
	s.echo.IPExtractor = clientIP(o.TrustedProxies)
	s.echo.HidePort = true
	s.echo.HTTPErrorHandler = httpx.ErrorHandler(o.Logger)
	s.routes(apiKeys, opsKeys)
	s.metrics.FreezeRoutes(routeList(s.echo.Routes()), zeroStatuses)
	return s
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Routes lists every registered method and path, for the test that holds
// them to api/openapi.yaml.
func (s *Server) Routes() []*echo.Route { return s.echo.Routes() }

// routeList is routes as the HTTP metrics learn them.
func routeList(routes []*echo.Route) []metrics.Route {
	out := make([]metrics.Route, 0, len(routes))
	for _, r := range routes {
		out = append(out, metrics.Route{Method: r.Method, Path: r.Path})
	}
	return out
}

// routes registers every route: read it top to bottom to know the API.
func (s *Server) routes(apiKeys, opsKeys httpx.Keyring) {
	e := s.echo
	e.Use(s.around) // the span (tracing.go), the request ID, the request log
	// "KiB": echo reads "16K" as 16,000 bytes.
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: strconv.Itoa(BodyLimit/1024) + "KiB",
		Skipper: func(c echo.Context) bool { return c.Path() == importPath || c.Path() == importFormPath }}))

	e.GET("/healthz", s.health.healthz)
	e.GET("/readyz", s.health.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{})))
	e.GET("/openapi.yaml", s.openapi)

	// Middleware per route, not per group: an echo group also claims its
	// unknown paths, and a 404 must stay a 404, not a 401.
	api := s.requireAPIKey(apiKeys, opsKeys)
	admit := s.admission.middleware
	idem := &s.idempotency
	// An Idempotency-Key is claimed before admission: a request that
	// waits for another's answer, or replays it, holds no decision slot.
	e.POST("/otp/send", s.otp.sendOTP, api, idem.idempotentSend, admit, httpx.Audited)
	e.POST("/otp/verify", s.otp.verifyOTP, api, admit, httpx.Audited)
	e.GET("/otp/verifications/:id", s.otp.getVerification, noStore, api, admit)
	e.POST("/otp/verifications/:id/cancel", s.otp.cancelVerification, noStore, api, admit, httpx.Audited)
	// The hottest route: its middleware chained once here, not by echo on
	// every request (a closure per middleware per request).
	e.POST("/limits/check", chained(s.limits.checkLimits, api, admit))
	// Twilio's delivery reports: its signature is the authentication.
	e.POST("/sms/status", s.sms.smsStatus, httpx.Audited)

	// Twilio Verify v2's routes for SMS (internal/verifyapi): a service's
	// HTTP Basic credential; every error in Verify's body (verify.Answer).
	v := s.verify
	vauth := []echo.MiddlewareFunc{v.Answer, noStore, v.Authenticate, admit, httpx.Audited}
	e.POST("/v2/Services/:ServiceSid/Verifications", v.CreateVerification, vauth...)
	e.GET("/v2/Services/:ServiceSid/Verifications/:Sid", v.FetchVerification, vauth...)
	e.POST("/v2/Services/:ServiceSid/Verifications/:Sid", v.UpdateVerification, vauth...)
	e.POST("/v2/Services/:ServiceSid/VerificationCheck", v.CheckVerification, vauth...)
	e.GET("/v2/Services/:Sid", v.FetchService, v.Answer, noStore, v.Authenticate)

	// Ops: an ops key (bearer) or an ops session; an API key is 403. The
	// page and its forms send the signed-out to /ops/login; the JSON API
	// answers them 401. The handlers are the ops desk's (internal/opsweb).
	signIn, desk, pages := s.desk.SignIn, s.desk.API, s.desk.Pages
	ops, page := signIn.RequireOps(false), signIn.RequireOps(true)
	e.GET("/ops/login", signIn.LoginForm, opsPrivate)
	e.POST("/ops/login", signIn.Login, opsPrivate)
	e.POST("/ops/logout", signIn.Logout, opsPrivate, page)
	e.GET("/ops", pages.Page, opsPrivate, page, httpx.Audited) // the number search is audited
	e.POST("/ops/actions/unblock", pages.FormUnblock, opsPrivate, page, httpx.Audited)
	e.POST("/ops/actions/deny", pages.FormDeny, opsPrivate, page, httpx.Audited)
	e.POST("/ops/actions/undeny", pages.FormUndeny, opsPrivate, page, httpx.Audited)
	e.POST("/ops/actions/clear-risk", pages.FormClearRisk, opsPrivate, page, httpx.Audited)
	// The page's import: the limit before the session's check, which
	// reads the form.
	e.POST(importFormPath, pages.FormImportTrusted, opsPrivate, middleware.BodyLimit(strconv.Itoa(ImportBodyLimit/1024)+"KiB"),
		page, httpx.Audited)
	e.POST("/ops/actions/trust", pages.FormTrust, opsPrivate, page, httpx.Audited)
	// The JSON API shows full numbers and audit rows: no cache keeps them.
	e.GET("/ops/blocked", desk.ListBlocked, opsPrivate, ops)
	e.DELETE("/ops/blocked/:phone", desk.Unblock, opsPrivate, ops, httpx.Audited)
	e.GET("/ops/denylist", desk.ListDeny, opsPrivate, ops)
	e.POST("/ops/denylist", desk.AddDeny, opsPrivate, ops, idem.idempotent, httpx.Audited)
	e.DELETE("/ops/denylist/:id", desk.RemoveDeny, opsPrivate, ops, httpx.Audited)
	e.GET("/ops/events", desk.ListEvents, opsPrivate, ops)
	// "Why did +X get no code?": what the service knows of one number.
	e.GET("/ops/numbers/:phone", desk.LookUpNumber, opsPrivate, ops, httpx.Audited)
	// Emergency overrides of the policy file.
	e.GET("/ops/overrides", desk.ListOverrides, opsPrivate, ops)
	e.POST("/ops/overrides", desk.AddOverride, opsPrivate, ops, idem.idempotent, httpx.Audited)
	e.DELETE("/ops/overrides/:id", desk.RemoveOverride, opsPrivate, ops, httpx.Audited)
	e.POST("/ops/actions/override", pages.FormOverride, opsPrivate, page, httpx.Audited)
	e.POST("/ops/actions/unoverride", pages.FormRemoveOverride, opsPrivate, page, httpx.Audited)
	e.GET("/ops/abuse", desk.Abuse, opsPrivate, ops)
	// The Verify services in force: from the policy, no secret.
	e.GET("/ops/services", desk.ListServices, opsPrivate, ops)
	// The network's risk score of a number (otp.risk): forgotten.
	e.DELETE("/ops/risk/:phone", desk.ClearRisk, opsPrivate, ops, httpx.Audited)
	// Trusted numbers an app verified before otpguard: a large body.
	e.POST(importPath, desk.ImportTrusted, opsPrivate, ops,
		middleware.BodyLimit(strconv.Itoa(ImportBodyLimit/1024)+"KiB"), idem.idempotent, httpx.Audited)
	// Works without the ops desk (it reads no SQL): ops key only, through
	// the sign-in limiter like every route that takes one.
	e.GET("/ops/status", s.health.opsStatus, opsPrivate, signIn.RequireOpsKey)
}

// chained is h behind mw (the first outermost), as echo would chain them
// for a route on every request.
func chained(h echo.HandlerFunc, mw ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// noStore marks the answer, refusals included, as not to be kept by a
// browser or proxy cache.
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return next(c)
	}
}

// opsPrivate marks an ops desk's answer, refusals and redirects
// included, as not to be kept by a browser or proxy cache (no-store),
// and keeps its address out of the Referer of any request it leads to
// (no-referrer): a searched number sits in the page's URL (/ops?q=,
// /ops/numbers/{phone}).
func opsPrivate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set(echo.HeaderCacheControl, "no-store")
		h.Set("Referrer-Policy", "no-referrer")
		return next(c)
	}
}

// around is the first middleware of every request: it completes the
// request's span (traceStart, traceEnd), gives the request its ID
// (requestID), hands a handler's error to the error handler, so that the
// status is the one answered, and then writes the request log line. One
// middleware for the three: echo chains the global middleware anew on
// every request, a closure each.
func (s *Server) around(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		span, traced := traceStart(c)
		requestID(c)
		if len(c.Request().TransferEncoding) > 0 {
			// RFC 9112 6.1: a request that came with both Content-Length
			// and Transfer-Encoding must close its connection once
			// answered. net/http drops the Content-Length before a handler
			// sees it, so every request with a transfer coding closes.
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // answered here; echo's error handler skips an answered error
		}
		s.requestLog(c, start, err)
		if traced {
			traceEnd(c, span, err)
		}
		return err
	}
}

// requestLog writes one structured line per request (request_log.go), at
// info but for a sample of the allowed checks: method, route, status,
// latency and request ID, and for a refusal its code and the masked
// number. Never the body, never the query. It also feeds the HTTP metrics.
// Its values are those echo's RequestLogger would give logRequest as this
// server configured it (status, method, route, latency, request ID,
// error); echo's passes them through a func value, an allocation per
// request on the hot path.
func (s *Server) requestLog(c echo.Context, start time.Time, err error) {
	req, res := c.Request(), c.Response()
	s.logRequest(c, middleware.RequestLoggerValues{StartTime: start, Latency: time.Since(start),
		Method: req.Method, RoutePath: c.Path(), RequestID: httpx.RequestID(c), Status: res.Status, Error: err})
}

// openapi: GET /openapi.yaml. The HTTP contract.
func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", s.spec)
}

// requestID gives every request an ID, in X-Request-Id and the logs. A
// caller's own ID is kept when it is short and plain, so one request can be
// followed across services; anything else is replaced, so no caller can
// write what it likes into our logs.
func requestID(c echo.Context) {
	id := newRequestID(c.Request().Header.Get(echo.HeaderXRequestID))
	// In the answer only, under its canonical key (Set would canonicalise
	// it on every request): the request log and the audit read it there
	// (httpx.RequestID); written into the request's headers too, it would
	// grow their map on every request.
	c.Response().Header()[echo.HeaderXRequestID] = []string{id}
}

// newRequestID is the ID of a request whose caller sent sent (in
// X-Request-Id; "" for none): sent when it is plain, else a new one.
func newRequestID(sent string) string {
	if httpx.PlainID(sent) {
		return sent
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
