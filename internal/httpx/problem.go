// Package httpx holds the HTTP pieces the API (httpapi) and the ops desk
// (opsweb) share: problem details and the one table from error codes to
// statuses, strict JSON decoding, bearer keys kept as digests, request IDs
// and the audit context. It knows echo and guard's errors, nothing else.
package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[problem.Code]int{
	problem.CodeInvalidRequest:      http.StatusBadRequest,
	problem.CodeInvalidPhone:        http.StatusUnprocessableEntity,
	problem.CodeInvalidCode:         http.StatusUnprocessableEntity,
	problem.CodeInvalidKey:          http.StatusUnprocessableEntity,
	problem.CodeInvalidCost:         http.StatusUnprocessableEntity,
	problem.CodeUnknownPolicy:       http.StatusNotFound,
	problem.CodeCooldown:            http.StatusTooManyRequests,
	problem.CodePhoneRateLimited:    http.StatusTooManyRequests,
	problem.CodeIPRateLimited:       http.StatusTooManyRequests,
	problem.CodeRateLimited:         http.StatusTooManyRequests,
	problem.CodeTooManyAttempts:     http.StatusTooManyRequests,
	problem.CodeWrongCode:           http.StatusBadRequest,
	problem.CodeNoActiveCode:        http.StatusBadRequest,
	problem.CodeDenied:              http.StatusForbidden,
	problem.CodeInvalidDestination:  http.StatusUnprocessableEntity,
	problem.CodeProviderUnavailable: http.StatusBadGateway,
	problem.CodeStoreUnavailable:    http.StatusServiceUnavailable,
	problem.CodeDatabaseUnavailable: http.StatusServiceUnavailable,
	problem.CodeOverloaded:          http.StatusServiceUnavailable,
	problem.CodeUnauthorized:        http.StatusUnauthorized,
	problem.CodeForbidden:           http.StatusForbidden,
	problem.CodeNotFound:            http.StatusNotFound,
	problem.CodeMethodNotAllowed:    http.StatusMethodNotAllowed,
	problem.CodeBodyTooLarge:        http.StatusRequestEntityTooLarge,
	problem.CodeInternal:            http.StatusInternalServerError,

	// The abuse defences (README.md, "Abuse defences").
	problem.CodeCountryNotAllowed:    http.StatusForbidden,
	problem.CodeNumberTypeNotAllowed: http.StatusForbidden,
	problem.CodePrefixRateLimited:    http.StatusTooManyRequests,
	problem.CodeCountryRateLimited:   http.StatusTooManyRequests,
	problem.CodeBudgetExhausted:      http.StatusServiceUnavailable,
	problem.CodeUnusualVolume:        http.StatusTooManyRequests,
	problem.CodeChallengeRequired:    http.StatusPreconditionRequired,
	problem.CodeChallengeUnavailable: http.StatusServiceUnavailable,

	// Idempotent sends and the verification lifecycle (idempotency.go,
	// verifications.go).
	problem.CodeInvalidIdempotencyKey:    http.StatusBadRequest,
	problem.CodeIdempotencyKeyReused:     http.StatusUnprocessableEntity,
	problem.CodeIdempotencyKeyInProgress: http.StatusConflict,
	problem.CodeVerificationNotFound:     http.StatusNotFound,
	problem.CodeVerificationNotPending:   http.StatusConflict,
	// The ops desk's emergency overrides (opsweb).
	problem.CodeCountryPaused:      http.StatusForbidden,
	problem.CodeCarrierPaused:      http.StatusForbidden,
	problem.CodeCarrierRateLimited: http.StatusTooManyRequests,
	problem.CodeOverrideLooser:     http.StatusUnprocessableEntity,
	problem.CodeUnknownCountry:     http.StatusUnprocessableEntity,
	// The network's risk score (guard/risk.go).
	problem.CodeHighRiskNumber: http.StatusForbidden,
}

// codeOfStatus turns echo's own errors (unknown route, wrong method, body
// too large) into codes, so they are problem details like every other error.
var codeOfStatus = map[int]problem.Code{
	http.StatusBadRequest:            problem.CodeInvalidRequest,
	http.StatusUnauthorized:          problem.CodeUnauthorized,
	http.StatusForbidden:             problem.CodeForbidden,
	http.StatusNotFound:              problem.CodeNotFound,
	http.StatusMethodNotAllowed:      problem.CodeMethodNotAllowed,
	http.StatusRequestEntityTooLarge: problem.CodeBodyTooLarge,
	http.StatusUnsupportedMediaType:  problem.CodeInvalidRequest,
}

// Problem is an RFC 9457 problem details body, with otpguard's stable code.
type Problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail"`
	Code         string `json:"code"`
	RequestID    string `json:"request_id,omitempty"`
	RetryAfter   *int   `json:"retry_after,omitempty"`
	AttemptsLeft *int   `json:"attempts_left,omitempty"`
	// VerificationStatus: the current status of a verification that was
	// not pending (409 verification_not_pending).
	VerificationStatus string `json:"verification_status,omitempty"`
	// Challenge: what to solve (428 challenge_required).
	Challenge *Challenge `json:"challenge,omitempty"`
	// Fallback: the channel open to a send a challenge or an automatic
	// rule held (otp.fallback_channel).
	Fallback *Fallback `json:"fallback,omitempty"`
}

// Fallback names the channel a held SMS send may be sent by instead: the
// same send again with this channel meets none of the automatic rules.
type Fallback struct {
	Channel string `json:"channel"`
}

// FallbackOf is the fallback an Error offers, as the problem shows it;
// nil when it offers none.
func FallbackOf(e *problem.Error) *Fallback {
	if e == nil || e.Fallback == "" {
		return nil
	}
	return &Fallback{Channel: e.Fallback}
}

// Challenge is a challenge_required answer's challenge object: type "pow"
// carries ALTCHA's fields, type "captcha" the provider's site key and the
// signed id the solution starts with ("<id>.<token>").
type Challenge struct {
	Type      string `json:"type"`
	Algorithm string `json:"algorithm,omitempty"`
	Challenge string `json:"challenge,omitempty"`
	Salt      string `json:"salt,omitempty"`
	MaxNumber int64  `json:"maxnumber,omitempty"`
	Signature string `json:"signature,omitempty"`
	SiteKey   string `json:"site_key,omitempty"`
	ID        string `json:"id,omitempty"`
}

// challengeOf is the challenge an Error carries (a *guard.Challenge), as
// the problem shows it; nil when there is none.
func challengeOf(v any) *Challenge {
	c, ok := v.(*guard.Challenge)
	if !ok || c == nil {
		return nil
	}
	return &Challenge{Type: string(c.Type), Algorithm: c.Algorithm, Challenge: c.Challenge, Salt: c.Salt,
		MaxNumber: c.MaxNumber, Signature: c.Signature, SiteKey: c.SiteKey, ID: c.ID}
}

// StatusClientClosed is what the request log records for a request whose
// caller hung up before the answer (nginx's 499; never seen by a client).
const StatusClientClosed = 499

// Status is the HTTP status of an error code (0 for a code the table does
// not hold: a 500).
func Status(code problem.Code) int { return statusOf[code] }

// ErrorHandler writes every error as problem details. Internal error text
// goes to the log, never to the client.
func ErrorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if errors.Is(c.Request().Context().Err(), context.Canceled) {
			// The caller hung up: nobody reads an answer, and it says
			// nothing about Redis (the breaker ignores it too).
			log.DebugContext(c.Request().Context(), "caller went away", "path", c.Path(), "request_id", RequestID(c), "err", err)
			c.Response().WriteHeader(StatusClientClosed)
			return
		}
		p := ProblemOf(err, RequestID(c))
		if p.Status >= 500 {
			LogFailure(c.Request().Context(), log, c.Path(), p, err)
		}
		if p.RetryAfter != nil {
			c.Response().Header().Set("Retry-After", strconv.Itoa(*p.RetryAfter))
		}
		c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
		c.Response().WriteHeader(p.Status)
		if c.Request().Method == http.MethodHead {
			return
		}
		_ = WriteJSON(c.Response(), p)
	}
}

// ProblemOf is the answer to err, whatever the transport: its status is
// Status, its Retry-After (when set) RetryAfter.
func ProblemOf(err error, requestID string) Problem {
	e := AsGuardError(err)
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	p := Problem{
		Type:         "urn:otpguard:problem:" + string(e.Code),
		Title:        http.StatusText(status),
		Status:       status,
		Detail:       e.Message,
		Code:         string(e.Code),
		RequestID:    requestID,
		AttemptsLeft: e.AttemptsLeft,

		VerificationStatus: e.VerificationStatus,
		Challenge:          challengeOf(e.Challenge),
		Fallback:           FallbackOf(e),
	}
	if e.RetryAfter > 0 {
		s := RetrySeconds(e.RetryAfter)
		p.RetryAfter = &s
	}
	return p
}

// LogFailure logs a 5xx answer p to err on route (its internal text goes
// here, never to the caller).
func LogFailure(ctx context.Context, log *slog.Logger, route string, p Problem, err error) {
	log.Log(ctx, limit.StoreFailureLevel(err), "request failed", "path", route, "code", p.Code,
		"request_id", p.RequestID, "err", err)
}

// AsGuardError is err as a *problem.Error: echo's own errors (unknown
// route, wrong method, body too large) by their status, anything else an
// internal error.
func AsGuardError(err error) *problem.Error {
	var ge *problem.Error
	if errors.As(err, &ge) {
		return ge
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code, ok := codeOfStatus[he.Code]
		if !ok {
			code = problem.CodeInternal
		}
		msg := http.StatusText(he.Code)
		switch he.Code {
		case http.StatusNotFound:
			msg = "no such route"
		case http.StatusMethodNotAllowed:
			msg = "method not allowed on this route"
		case http.StatusRequestEntityTooLarge:
			msg = "request body is too large"
		}
		return &problem.Error{Code: code, Message: msg, Err: err}
	}
	return &problem.Error{Code: problem.CodeInternal, Message: "internal error", Err: err}
}

// RetrySeconds rounds up: a client told "0" would retry at once and be
// refused again.
func RetrySeconds(d time.Duration) int { return problem.RetrySeconds(d) }

// RequestID is the request's ID, as the answer's X-Request-Id carries it.
func RequestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}
