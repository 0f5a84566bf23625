package verifyapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// Verify's error codes for the cases otpguard has
// (https://www.twilio.com/docs/api/errors), and otpguard's own where
// Verify has none.
const (
	CodeInvalidParameter = 60200 // 400: a parameter is missing, malformed, unknown or repeated
	CodeMaxCheckAttempts = 60202 // 429: the code's guesses are spent
	CodeMaxSendAttempts  = 60203 // 429: the number's sends are spent (cooldown, per number)
	CodeBlocked          = 60410 // 403: the send is refused (deny-list, country, number type, risk)
	CodeAuthenticate     = 20003 // 401: no credential, or a wrong one
	CodeNotFound         = 20404 // 404: no such service or verification (another service's included)
	CodeTooManyRequests  = 20429 // 429: another of otpguard's limits (address, prefix, country, volume)
	CodeInternal         = 20500 // 500
	CodeUnavailable      = 20503 // 502, 503: the store, the SMS provider, overload or the spend budget
	// CodeChallengeRequired is otpguard's own (428): the send would be
	// challenged, which Verify's SDKs cannot carry. Its details hold the
	// challenge and where to send its solution (docs/verify.md).
	CodeChallengeRequired = 428001
)

// moreInfo is where a code is explained.
func moreInfo(code int) string {
	if code == CodeChallengeRequired {
		return "https://github.com/otpguard/otpguard/blob/main/docs/verify.md#the-challenge"
	}
	return "https://www.twilio.com/docs/errors/" + strconv.Itoa(code)
}

// verifyError is Verify's error body (code, message, more_info, status),
// and otpguard's details where it has more to say (a challenge, a
// fallback channel).
type verifyError struct {
	Code     int           `json:"code"`
	Message  string        `json:"message"`
	MoreInfo string        `json:"more_info"`
	Status   int           `json:"status"`
	Details  *errorDetails `json:"details,omitempty"`
}

// errorDetails is otpguard's details of a refusal: a 428001's challenge
// as /otp/send's 428 gives it, and how a caller that can solve it sends
// the solution; the channel open instead when the policy has a fallback
// (a 428001, or an automatic rule's 20429 or 60410) and how to take it.
// twilio-go's TwilioRestError and twilio-node's RestException keep
// details as they came.
type errorDetails struct {
	Challenge *httpx.Challenge `json:"challenge,omitempty"`
	Solution  string           `json:"solution,omitempty"`
	Fallback  *fallbackInfo    `json:"fallback,omitempty"`
}

// fallbackInfo is the fallback channel of a held SMS send
// (otp.fallback_channel, docs/verify.md "A fallback channel").
type fallbackInfo struct {
	Channel string `json:"channel"`
	Retry   string `json:"retry"`
}

// codeOf maps otpguard's refusals to Verify's code and status; a code
// not listed keeps otpguard's status, with Verify's generic code for it.
var codeOf = map[problem.Code]struct{ code, status int }{
	problem.CodeInvalidRequest:       {CodeInvalidParameter, http.StatusBadRequest},
	problem.CodeInvalidPhone:         {CodeInvalidParameter, http.StatusBadRequest},
	problem.CodeInvalidCode:          {CodeInvalidParameter, http.StatusBadRequest},
	problem.CodeInvalidDestination:   {CodeInvalidParameter, http.StatusBadRequest},
	problem.CodeUnknownCountry:       {CodeInvalidParameter, http.StatusBadRequest},
	problem.CodeCooldown:             {CodeMaxSendAttempts, http.StatusTooManyRequests},
	problem.CodePhoneRateLimited:     {CodeMaxSendAttempts, http.StatusTooManyRequests},
	problem.CodeTooManyAttempts:      {CodeMaxCheckAttempts, http.StatusTooManyRequests},
	problem.CodeNoActiveCode:         {CodeNotFound, http.StatusNotFound},
	problem.CodeVerificationNotFound: {CodeNotFound, http.StatusNotFound},
	// Verify answers 404 for a verification no longer pending.
	problem.CodeVerificationNotPending: {CodeNotFound, http.StatusNotFound},
	problem.CodeNotFound:               {CodeNotFound, http.StatusNotFound},
	problem.CodeUnauthorized:           {CodeAuthenticate, http.StatusUnauthorized},
	problem.CodeDenied:                 {CodeBlocked, http.StatusForbidden},
	problem.CodeCountryNotAllowed:      {CodeBlocked, http.StatusForbidden},
	problem.CodeNumberTypeNotAllowed:   {CodeBlocked, http.StatusForbidden},
	problem.CodeCountryPaused:          {CodeBlocked, http.StatusForbidden},
	problem.CodeCarrierPaused:          {CodeBlocked, http.StatusForbidden},
	problem.CodeHighRiskNumber:         {CodeBlocked, http.StatusForbidden},
	problem.CodeIPRateLimited:          {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodePrefixRateLimited:      {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodeCountryRateLimited:     {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodeCarrierRateLimited:     {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodeUnusualVolume:          {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodeRateLimited:            {CodeTooManyRequests, http.StatusTooManyRequests},
	problem.CodeChallengeRequired:      {CodeChallengeRequired, http.StatusPreconditionRequired},
}

// verifyErrorOf is the answer to err: Verify's code and status, the
// message otpguard's (never internal text), and Retry-After's seconds (0:
// none).
func verifyErrorOf(err error) (verifyError, int) {
	p := httpx.ProblemOf(err, "")
	m, ok := codeOf[problem.Code(p.Code)]
	switch {
	case ok:
	case p.Status == http.StatusInternalServerError:
		m.code, m.status = CodeInternal, p.Status
	case p.Status >= 500:
		m.code, m.status = CodeUnavailable, p.Status
	default:
		m.code, m.status = CodeInvalidParameter, p.Status
	}
	v := verifyError{Code: m.code, Message: p.Detail, MoreInfo: moreInfo(m.code), Status: m.status}
	if p.Challenge != nil {
		v.Details = &errorDetails{Challenge: p.Challenge,
			Solution: "solve it, then create the verification again with the form parameter " + paramChallenge + "=<solution>"}
	}
	if p.Fallback != nil {
		if v.Details == nil {
			v.Details = &errorDetails{}
		}
		v.Details.Fallback = &fallbackInfo{Channel: p.Fallback.Channel,
			Retry: "create the verification again with Channel=" + p.Fallback.Channel}
	}
	retry := 0
	if p.RetryAfter != nil {
		retry = *p.RetryAfter
	}
	return v, retry
}

// invalidParameter is a 60200 with message.
func invalidParameter(message string) error {
	return problem.Errorf(problem.CodeInvalidRequest, "%s", message)
}

// Answer is the first middleware of every Verify route: an error of the
// route (its authentication, admission and handler) is written as
// Verify's error body, with Retry-After when waiting helps, and handed on
// for the request log, which reads its otpguard code. A 5xx's internal
// text goes to the log, never to the caller; a caller that hung up gets
// nothing (the server's error handler records it).
func (h *Handlers) Answer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed || errors.Is(c.Request().Context().Err(), context.Canceled) {
			return err
		}
		v, retry := verifyErrorOf(err)
		if v.Status >= 500 {
			httpx.LogFailure(c.Request().Context(), h.log, c.Path(), httpx.ProblemOf(err, httpx.RequestID(c)), err)
		}
		if retry > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(retry))
		}
		if werr := c.JSON(v.Status, v); werr != nil {
			return werr
		}
		return err
	}
}
