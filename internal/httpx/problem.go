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
)

// statusOf is the one table from error codes to HTTP statuses.
var statusOf = map[guard.Code]int{
	guard.CodeInvalidRequest:      http.StatusBadRequest,
	guard.CodeInvalidPhone:        http.StatusUnprocessableEntity,
	guard.CodeInvalidCode:         http.StatusUnprocessableEntity,
	guard.CodeInvalidKey:          http.StatusUnprocessableEntity,
	guard.CodeInvalidCost:         http.StatusUnprocessableEntity,
	guard.CodeUnknownPolicy:       http.StatusNotFound,
	guard.CodeCooldown:            http.StatusTooManyRequests,
	guard.CodePhoneRateLimited:    http.StatusTooManyRequests,
	guard.CodeIPRateLimited:       http.StatusTooManyRequests,
	guard.CodeRateLimited:         http.StatusTooManyRequests,
	guard.CodeTooManyAttempts:     http.StatusTooManyRequests,
	guard.CodeWrongCode:           http.StatusBadRequest,
	guard.CodeNoActiveCode:        http.StatusBadRequest,
	guard.CodeDenied:              http.StatusForbidden,
	guard.CodeInvalidDestination:  http.StatusUnprocessableEntity,
	guard.CodeProviderUnavailable: http.StatusBadGateway,
	guard.CodeStoreUnavailable:    http.StatusServiceUnavailable,
	guard.CodeDatabaseUnavailable: http.StatusServiceUnavailable,
	guard.CodeOverloaded:          http.StatusServiceUnavailable,
	guard.CodeUnauthorized:        http.StatusUnauthorized,
	guard.CodeForbidden:           http.StatusForbidden,
	guard.CodeNotFound:            http.StatusNotFound,
	guard.CodeMethodNotAllowed:    http.StatusMethodNotAllowed,
	guard.CodeBodyTooLarge:        http.StatusRequestEntityTooLarge,
	guard.CodeInternal:            http.StatusInternalServerError,

	// The abuse defences (README.md, "Abuse defences").
	guard.CodeCountryNotAllowed:    http.StatusForbidden,
	guard.CodeNumberTypeNotAllowed: http.StatusForbidden,
	guard.CodePrefixRateLimited:    http.StatusTooManyRequests,
	guard.CodeCountryRateLimited:   http.StatusTooManyRequests,
	guard.CodeBudgetExhausted:      http.StatusServiceUnavailable,
	guard.CodeUnusualVolume:        http.StatusTooManyRequests,
	guard.CodeChallengeRequired:    http.StatusPreconditionRequired,
	guard.CodeChallengeUnavailable: http.StatusServiceUnavailable,

	// Idempotent sends and the verification lifecycle (idempotency.go,
	// verifications.go).
	guard.CodeInvalidIdempotencyKey:    http.StatusBadRequest,
	guard.CodeIdempotencyKeyReused:     http.StatusUnprocessableEntity,
	guard.CodeIdempotencyKeyInProgress: http.StatusConflict,
	guard.CodeVerificationNotFound:     http.StatusNotFound,
	guard.CodeVerificationNotPending:   http.StatusConflict,
	// The ops desk's emergency overrides (opsweb).
	guard.CodeCountryPaused:  http.StatusForbidden,
	guard.CodeOverrideLooser: http.StatusUnprocessableEntity,
}

// codeOfStatus turns echo's own errors (unknown route, wrong method, body
// too large) into codes, so they are problem details like every other error.
var codeOfStatus = map[int]guard.Code{
	http.StatusBadRequest:            guard.CodeInvalidRequest,
	http.StatusUnauthorized:          guard.CodeUnauthorized,
	http.StatusForbidden:             guard.CodeForbidden,
	http.StatusNotFound:              guard.CodeNotFound,
	http.StatusMethodNotAllowed:      guard.CodeMethodNotAllowed,
	http.StatusRequestEntityTooLarge: guard.CodeBodyTooLarge,
	http.StatusUnsupportedMediaType:  guard.CodeInvalidRequest,
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

func challengeOf(c *guard.Challenge) *Challenge {
	if c == nil {
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
func Status(code guard.Code) int { return statusOf[code] }

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

		VerificationStatus: string(e.VerificationStatus),
		Challenge:          challengeOf(e.Challenge),
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
	log.Log(ctx, guard.StoreFailureLevel(err), "request failed", "path", route, "code", p.Code,
		"request_id", p.RequestID, "err", err)
}

// AsGuardError is err as a *guard.Error: echo's own errors (unknown
// route, wrong method, body too large) by their status, anything else an
// internal error.
func AsGuardError(err error) *guard.Error {
	var ge *guard.Error
	if errors.As(err, &ge) {
		return ge
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code, ok := codeOfStatus[he.Code]
		if !ok {
			code = guard.CodeInternal
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
		return &guard.Error{Code: code, Message: msg, Err: err}
	}
	return &guard.Error{Code: guard.CodeInternal, Message: "internal error", Err: err}
}

// RetrySeconds rounds up: a client told "0" would retry at once and be
// refused again.
func RetrySeconds(d time.Duration) int { return guard.RetrySeconds(d) }

// RequestID is the request's ID, as the answer's X-Request-Id carries it.
func RequestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}
