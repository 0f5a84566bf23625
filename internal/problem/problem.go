// Package problem holds the one error type of otpguard's domains, Error,
// and its codes. It sits below both the limiter (package limit) and the
// OTP rules (package guard), which refuse and fail with it, and the HTTP
// packages map its codes to statuses (httpx).
package problem

import (
	"errors"
	"fmt"
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

	// The abuse defences (README.md, "Abuse defences").
	CodeCountryNotAllowed    Code = "country_not_allowed"
	CodeNumberTypeNotAllowed Code = "number_type_not_allowed"
	CodePrefixRateLimited    Code = "prefix_rate_limited"
	CodeCountryRateLimited   Code = "country_rate_limited"
	CodeBudgetExhausted      Code = "budget_exhausted"
	CodeUnusualVolume        Code = "unusual_volume"

	// A challenge before a refusal: 428 with a challenge to solve, and 503
	// when the verifier (a CAPTCHA provider) cannot answer.
	CodeChallengeRequired    Code = "challenge_required"
	CodeChallengeUnavailable Code = "challenge_unavailable"

	// Idempotent sends and the verification lifecycle (README.md,
	// "Idempotent sends and the verification lifecycle").
	CodeInvalidIdempotencyKey    Code = "invalid_idempotency_key"
	CodeIdempotencyKeyReused     Code = "idempotency_key_reused"
	CodeIdempotencyKeyInProgress Code = "idempotency_key_in_progress"
	CodeVerificationNotFound     Code = "verification_not_found"
	CodeVerificationNotPending   Code = "verification_not_pending"

	// CodeOverrideLooser refuses an override that would loosen the policy file.
	CodeOverrideLooser Code = "override_looser"
	// CodeCountryPaused refuses a send to a country the ops desk paused.
	CodeCountryPaused Code = "country_paused"
	// CodeCarrierPaused refuses a send to a carrier of a country the ops
	// desk paused; CodeCarrierRateLimited a send past the ops desk's limit
	// on one carrier of a country.
	CodeCarrierPaused      Code = "carrier_paused"
	CodeCarrierRateLimited Code = "carrier_rate_limited"
	// CodeUnknownCountry refuses an override naming a country that has no
	// numbering plan (POST /ops/overrides).
	CodeUnknownCountry Code = "unknown_country"
	// CodeHighRiskNumber refuses a send to a number the network's risk
	// score (otp.risk) puts at or above refuse_above, or blocks.
	CodeHighRiskNumber Code = "high_risk_number"
)

// Error is the one error type of the domains. Message is safe to show to a
// caller; Err (the cause) is for logs only and never leaves the process.
//
// The OTP rules' details are held in forms this package can name without
// knowing them: the verification's status as its string, the challenge as
// the *guard.Challenge it is.
type Error struct {
	Code       Code
	Message    string
	RetryAfter time.Duration // > 0 when waiting helps (429, 503)
	// AttemptsLeft is set on a wrong guess against a live code, and
	// VerificationID to the code's verification (for the Verify routes'
	// answer; /otp/verify does not show it).
	AttemptsLeft   *int
	VerificationID string
	// VerificationStatus is the current status of a verification that a
	// request could not change (verification_not_pending).
	VerificationStatus string
	// Usage names the limit that refused and how far past it the request
	// was ("5 of 3 per 10m"); it goes to the audit event's detail, never
	// to the caller.
	Usage string
	// Challenge is set on challenge_required: what to solve, a
	// *guard.Challenge.
	Challenge any
	// Fallback names the channel a send a challenge or an automatic rule
	// held may be sent by instead (otp.fallback_channel); "" none.
	Fallback string
	Err      error
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

// CodeOf returns the Code of err, CodeInternal for an error that is not an
// *Error, and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

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
