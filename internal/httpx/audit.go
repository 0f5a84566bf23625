package httpx

import (
	"context"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
)

// Audited gives the request's context its request ID, so that the audit
// events it records carry it (guard.Event.RequestID). Only on the routes
// that record events: the others do not pay for the context.
func Audited(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.SetRequest(c.Request().WithContext(AuditContext(c)))
		return next(c)
	}
}

// AuditContext is the request's context with its request ID. The
// authentication middleware records its events (a failed sign-in, a
// lock-out) with it: it runs on every route, before the route's own
// Audited.
func AuditContext(c echo.Context) context.Context {
	return guard.WithRequestID(c.Request().Context(), RequestID(c))
}

// PlainID reports whether id may serve as a request ID: short, and only
// letters, digits, '-', '_' and '.', so no caller can write what it likes
// into our logs.
func PlainID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// logPhoneKey is where a handler leaves the number (E.164) its request
// concerned, for the request log line to mask.
const logPhoneKey = "otpguard.phone"

// LogPhone notes the number a request concerned, for its log line (which
// masks it).
func LogPhone(c echo.Context, e164 string) {
	if e164 != "" {
		c.Set(logPhoneKey, e164)
	}
}

// LoggedPhone is the number LogPhone noted; "" for none.
func LoggedPhone(c echo.Context) string {
	phone, _ := c.Get(logPhoneKey).(string)
	return phone
}
