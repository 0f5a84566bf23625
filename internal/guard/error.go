// Package guard holds otpguard's domain: OTP rules, limit policies, decisions
// and errors. It knows nothing of HTTP, SQL or SMS providers; those reach it
// through the small interfaces declared next to the code that uses them.
//
// Those interfaces (here, and likewise in ops and resilience) are named for
// the role they play, as a noun: what they keep (Codes, Verifications,
// Blocks, DenyList, AuditLog) or what they do (Counter, Sender, Syncer).
// Never "XStore": the store is Redis (package store), and one
// implementation may play several roles.
package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"
)

// Code is a stable, machine-readable cause of a refusal or failure. Clients
// switch on it; the HTTP layer maps each code to one status.
type Code string

// The codes otpguard answers with. They are part of the API: never rename one.
const (
	CodeInvalidRequest      Code = "invalid_request"
	CodeInvalidPhone        Code = "invalid_phone"
	CodeInvalidCode         Code = "invalid_code"
	CodeInvalidKey          Code = "invalid_key"
	CodeInvalidCost         Code = "invalid_cost"
	CodeUnknownPolicy       Code = "unknown_policy"
	CodeCooldown            Code = "cooldown"
	CodePhoneRateLimited    Code = "phone_rate_limited"
	CodeIPRateLimited       Code = "ip_rate_limited"
	CodeRateLimited         Code = "rate_limited"
	CodeWrongCode           Code = "wrong_code"
	CodeNoActiveCode        Code = "no_active_code"
	CodeTooManyAttempts     Code = "too_many_attempts"
	CodeDenied              Code = "denied"
	CodeInvalidDestination  Code = "invalid_destination"
	CodeProviderUnavailable Code = "provider_unavailable"
	CodeStoreUnavailable    Code = "store_unavailable"
	// CodeDatabaseUnavailable: the ops database (SQL) did not answer in
	// time, or is not connected yet; only ops routes depend on it.
	CodeDatabaseUnavailable Code = "database_unavailable"
	CodeOverloaded          Code = "overloaded"
	CodeUnauthorized        Code = "unauthorized"
	CodeForbidden           Code = "forbidden"
	CodeNotFound            Code = "not_found"
	CodeMethodNotAllowed    Code = "method_not_allowed"
	CodeBodyTooLarge        Code = "body_too_large"
	CodeInternal            Code = "internal"

	// The abuse defences (pumping.go; README.md, "Abuse defences").
	CodeCountryNotAllowed    Code = "country_not_allowed"
	CodeNumberTypeNotAllowed Code = "number_type_not_allowed"
	CodePrefixRateLimited    Code = "prefix_rate_limited"
	CodeCountryRateLimited   Code = "country_rate_limited"
	CodeBudgetExhausted      Code = "budget_exhausted"
	CodeUnusualVolume        Code = "unusual_volume"

	// A challenge before a refusal (challenge.go): 428 with a challenge to
	// solve, and 503 when the verifier (a CAPTCHA provider) cannot answer.
	CodeChallengeRequired    Code = "challenge_required"
	CodeChallengeUnavailable Code = "challenge_unavailable"

	// Idempotent sends and the verification lifecycle (verification.go;
	// README.md, "Idempotent sends and the verification lifecycle").
	CodeInvalidIdempotencyKey    Code = "invalid_idempotency_key"
	CodeIdempotencyKeyReused     Code = "idempotency_key_reused"
	CodeIdempotencyKeyInProgress Code = "idempotency_key_in_progress"
	CodeVerificationNotFound     Code = "verification_not_found"
	CodeVerificationNotPending   Code = "verification_not_pending"
)

// Error is the one error type of the domain. Message is safe to show to a
// caller; Err (the cause) is for logs only and never leaves the process.
type Error struct {
	Code       Code
	Message    string
	RetryAfter time.Duration // > 0 when waiting helps (429, 503)
	// AttemptsLeft is set on a wrong guess against a live code.
	AttemptsLeft *int
	// VerificationStatus is the current status of a verification that a
	// request could not change (verification_not_pending).
	VerificationStatus VerificationStatus
	// Usage names the limit that refused and how far past it the request
	// was ("5 of 3 per 10m"); it goes to the audit event's detail, never
	// to the caller.
	Usage string
	// Challenge is set on challenge_required: what to solve.
	Challenge *Challenge
	Err       error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted, caller-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of err, CodeInternal for an error that is not an
// *Error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrNotFound is returned by stores when the thing asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnindexed is returned by SaveCode, with the attempts of the code it
// replaced, when the code and its verification record were saved but the
// id's index (the id -> number key, on another master of a Redis Cluster)
// was not: the code verifies, but its record cannot be read by id, so the
// send answers no verification_id. It is not a failure of the number's
// own keys (store.Redis.SaveCode).
var ErrUnindexed = errors.New("the verification id was not indexed")

// ErrStoreUnavailable is the cause of a store call the fallback did not make: the
// breaker is open, or the store already failed within the same decision.
var ErrStoreUnavailable = errors.New("the shared store is unavailable")

// ErrOverloaded is the cause of a decision this instance gave up on while
// Redis was healthy: otpguard itself could not keep up (too many decisions
// in flight, or a call that outlived the ceiling on a saturated host). It is
// shed with 503 overloaded, never decided by the fallback, and says nothing
// about Redis.
var ErrOverloaded = errors.New("otpguard is overloaded")

// Overloaded is the error a shed request answers with: 503 overloaded and
// a short Retry-After.
func Overloaded(err error) *Error {
	return &Error{Code: CodeOverloaded, Message: "otpguard is overloaded; try again in a moment", RetryAfter: time.Second, Err: err}
}

// storeError is what a failed store call answers: 503 overloaded when
// otpguard gave up on a healthy Redis, 503 store_unavailable otherwise.
func storeError(err error) *Error {
	if errors.Is(err, ErrOverloaded) {
		return Overloaded(err)
	}
	return StoreUnavailable(err, StoreRetryAfter)
}

// StoreUnavailable wraps a failure of the limit store: the caller sees 503
// and a retry hint, the log sees the cause. The ops desk answers a failed
// unblock or block listing with it too.
func StoreUnavailable(err error, retryAfter time.Duration) *Error {
	return &Error{
		Code:       CodeStoreUnavailable,
		Message:    "the limit store is unavailable; try again shortly",
		RetryAfter: retryAfter,
		Err:        err,
	}
}

// StoreFailureLevel is how loudly to log a decision the store failed. An
// outage is told once, by the breaker opening (one WARN line, Fallback),
// not by every request it meets: a refusal by the open breaker
// (ErrStoreUnavailable), and a call that timed out or lost its connection,
// log at debug. Anything else (an error reply, a reply otpguard cannot
// read) says something is wrong with the store's contents or with
// otpguard, and is an error worth its line.
func StoreFailureLevel(err error) slog.Level {
	if errors.Is(err, ErrStoreUnavailable) || errors.Is(err, ErrOverloaded) || errors.Is(err, context.Canceled) || isTransportFailure(err) {
		return slog.LevelDebug
	}
	return slog.LevelError
}

// isTransportFailure reports whether err is a store call that did not get
// an answer: its deadline passed, or the connection failed (a net.Error,
// EOF), whatever client made it.
func isTransportFailure(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr)
}
