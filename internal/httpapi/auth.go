package httpapi

import (
	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// requireAPIKey admits requests bearing an API key. An ops key is
// recognised and refused with 403, so a caller learns it has the wrong kind
// of credential; no key is 401. Every key sent is decided by the API-key
// limiter of the caller's address (ops.SignInLimiter.Admit) before its
// outcome is acted on: a wrong one is counted, exactly across instances,
// and once an address has spent its wrong keys every key from it is 429
// with Retry-After until the window ends. The key that spends the last
// one is audited, once per address and window.
func (s *Server) requireAPIKey(apiKeys, opsKeys httpx.Keyring) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, ok := httpx.Bearer(c)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
				return problem.Errorf(problem.CodeUnauthorized, "send Authorization: Bearer <API key>")
			}
			good, opsKey := apiKeys.Holds(token), opsKeys.Holds(token)
			ip := c.RealIP()
			last, err := s.apiKeyLimit.Admit(c.Request().Context(), ip, good || opsKey)
			if err != nil {
				return err
			}
			if last {
				s.lockedOut(c, ip)
			}
			switch {
			case good:
				return next(c)
			case opsKey:
				return problem.Errorf(problem.CodeForbidden, "this route needs an API key, not an ops key")
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard", error="invalid_token"`)
			return problem.Errorf(problem.CodeUnauthorized, "the bearer key is not valid")
		}
	}
}

// lockedOut logs and audits an address that has just sent its last wrong
// API key or Verify credential (they share the limiter): refused until the
// window ends.
func (s *Server) lockedOut(c echo.Context, ip string) {
	s.log.WarnContext(c.Request().Context(), "an address has sent the limit's wrong API keys; refusing it until the window ends",
		"ip", ip, "failures", s.apiKeyLimit.Limit().Failures, "window", s.apiKeyLimit.Limit().Window.String())
	if s.ops != nil {
		s.ops.RecordKeyLockout(httpx.AuditContext(c), ip, s.apiKeyLimit.Limit())
	}
}
