package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
)

// keyring holds bearer keys as SHA-256 digests: comparing digests of equal
// length in constant time leaks neither a key's content nor its length.
type keyring [][sha256.Size]byte

func newKeyring(keys []string) keyring {
	k := make(keyring, 0, len(keys))
	for _, key := range keys {
		if key != "" {
			k = append(k, sha256.Sum256([]byte(key)))
		}
	}
	return k
}

// holds reports whether key is on the ring, looking at every key every time.
func (k keyring) holds(key string) bool {
	d := sha256.Sum256([]byte(key))
	found := 0
	for i := range k {
		found |= subtle.ConstantTimeCompare(d[:], k[i][:])
	}
	return found == 1
}

// bearer extracts the token of "Authorization: Bearer <token>".
func bearer(c echo.Context) (string, bool) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// requireAPIKey admits requests bearing an API key. An ops key is
// recognised and refused with 403, so a caller learns it has the wrong kind
// of credential; no key is 401. Every key sent is decided by the API-key
// limiter of the caller's address (ops.SignInLimiter.Admit) before its
// outcome is acted on: a wrong one is counted, exactly across instances,
// and once an address has spent its wrong keys every key from it is 429
// with Retry-After until the window ends. The key that spends the last
// one is audited, once per address and window.
func (s *Server) requireAPIKey(apiKeys, opsKeys keyring) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, ok := bearer(c)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
				return guard.Errorf(guard.CodeUnauthorized, "send Authorization: Bearer <API key>")
			}
			good, opsKey := apiKeys.holds(token), opsKeys.holds(token)
			ip := c.RealIP()
			last, err := s.apiKeyLimit.Admit(c.Request().Context(), ip, good || opsKey)
			if err != nil {
				return err
			}
			if last {
				s.log.WarnContext(c.Request().Context(), "an address has sent the limit's wrong API keys; refusing it until the window ends",
					"ip", ip, "failures", s.apiKeyLimit.Limit().Failures, "window", s.apiKeyLimit.Limit().Window.String())
				if s.ops != nil {
					s.ops.RecordKeyLockout(auditContext(c), ip, s.apiKeyLimit.Limit())
				}
			}
			switch {
			case good:
				return next(c)
			case opsKey:
				return guard.Errorf(guard.CodeForbidden, "this route needs an API key, not an ops key")
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard", error="invalid_token"`)
			return guard.Errorf(guard.CodeUnauthorized, "the bearer key is not valid")
		}
	}
}
