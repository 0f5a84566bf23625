package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Error is a refusal or failure otpguard answered with: its RFC 9457
// problem details, read back. Code is otpguard's stable cause
// (README.md, "Problem codes"); switch on it, not on Detail.
type Error struct {
	Status     int           // the HTTP status
	Code       string        // e.g. "cooldown"; "" when the answer was not problem details (a proxy's page)
	Type       string        // "urn:otpguard:problem:<code>"
	Title      string        // the status text
	Detail     string        // a sentence for people
	RequestID  string        // otpguard's X-Request-Id: quote it when asking ops why
	RetryAfter time.Duration // from Retry-After: when asking again may help (429, 503, 409 in progress)
	// AttemptsLeft is set on wrong_code: the guesses the code has left.
	AttemptsLeft *int
	// Field names the request field at fault when otpguard says which
	// (AddOverride's refusals: "kind", "subject", "limit", "expires_in",
	// "reason").
	Field string
	// Challenge is set on challenge_required (428): what the user's
	// browser solves before the app sends again (ChallengeOf).
	Challenge *Challenge
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "otpguard: %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Is makes errors.Is(err, &client.Error{Code: "cooldown"}) match on the
// code (and on the status, when the target sets one).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return (t.Code == "" || t.Code == e.Code) && (t.Status == 0 || t.Status == e.Status)
}

// IsCode reports whether err is (or wraps) an *Error with this code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// RetryAfter returns how long err says to wait before asking again, and
// whether it says so at all.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}

// IsUnavailable reports whether err means otpguard gave no decision: no
// answer (network, deadline), or a 5xx (overloaded, store_unavailable,
// a proxy's 502). The middleware applies its FailOpen/FailClosed choice
// to these.
func IsUnavailable(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && e.Status >= 500
}

// The codes a caller most often switches on; the full list is in
// README.md, "Problem codes". New codes may appear: treat an unknown code
// by its Status.
const (
	CodeInvalidRequest    = "invalid_request"
	CodeInvalidPhone      = "invalid_phone"
	CodeInvalidCode       = "invalid_code"
	CodeInvalidKey        = "invalid_key"
	CodeInvalidCost       = "invalid_cost"
	CodeUnknownPolicy     = "unknown_policy"
	CodeCooldown          = "cooldown"
	CodePhoneRateLimited  = "phone_rate_limited"
	CodeIPRateLimited     = "ip_rate_limited"
	CodeRateLimited       = "rate_limited"
	CodeWrongCode         = "wrong_code"
	CodeNoActiveCode      = "no_active_code"
	CodeTooManyAttempts   = "too_many_attempts"
	CodeDenied            = "denied"
	CodeStoreUnavailable  = "store_unavailable"
	CodeOverloaded        = "overloaded"
	CodeUnauthorized      = "unauthorized"
	CodeForbidden         = "forbidden"
	CodeNotFound          = "not_found"
	CodeBudgetExhausted   = "budget_exhausted"
	CodeUnusualVolume     = "unusual_volume"
	CodeProviderDown      = "provider_unavailable"
	CodeDatabaseDown      = "database_unavailable"
	CodeInvalidDest       = "invalid_destination"
	CodeCountryNotAllowed = "country_not_allowed"

	// The verification lifecycle and idempotent sends.
	CodeVerificationNotFound     = "verification_not_found"
	CodeVerificationNotPending   = "verification_not_pending"
	CodeIdempotencyKeyReused     = "idempotency_key_reused"
	CodeIdempotencyKeyInProgress = "idempotency_key_in_progress"
)

// problem is the wire form of problem details.
type problem struct {
	Type         string     `json:"type"`
	Title        string     `json:"title"`
	Status       int        `json:"status"`
	Detail       string     `json:"detail"`
	Code         string     `json:"code"`
	RequestID    string     `json:"request_id"`
	RetryAfter   *int       `json:"retry_after"`
	AttemptsLeft *int       `json:"attempts_left"`
	Field        string     `json:"field"`
	Challenge    *Challenge `json:"challenge"`
}

// problemOf turns an answer that is not a success into an *Error, reading
// problem details when the body holds them.
func problemOf(r *reply) *Error {
	e := &Error{Status: r.status, Title: http.StatusText(r.status), RetryAfter: retryAfter(r.header),
		RequestID: r.header.Get("X-Request-Id")}
	var p problem
	if json.Unmarshal(r.body, &p) == nil && p.Code != "" {
		e.Code, e.Type, e.Detail, e.AttemptsLeft, e.Field = p.Code, p.Type, p.Detail, p.AttemptsLeft, p.Field
		e.Challenge = p.Challenge
		if p.Title != "" {
			e.Title = p.Title
		}
		if p.RequestID != "" {
			e.RequestID = p.RequestID
		}
		if e.RetryAfter == 0 && p.RetryAfter != nil && *p.RetryAfter > 0 {
			e.RetryAfter = time.Duration(*p.RetryAfter) * time.Second
		}
	}
	return e
}
