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

// requireKey admits requests bearing a key of allowed. A key of the other
// ring (an API key on /ops, say) is recognised and refused with 403, so a
// caller learns it has the wrong kind of credential; anything else is 401.
func requireKey(allowed, other keyring, what string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, ok := bearer(c)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard"`)
				return guard.Errorf(guard.CodeUnauthorized, "send Authorization: Bearer <%s>", what)
			}
			if allowed.holds(token) {
				return next(c)
			}
			if other.holds(token) {
				return guard.Errorf(guard.CodeForbidden, "this route needs an %s", what)
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="otpguard", error="invalid_token"`)
			return guard.Errorf(guard.CodeUnauthorized, "the bearer key is not valid")
		}
	}
}
