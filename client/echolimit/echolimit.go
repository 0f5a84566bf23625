// Package echolimit is limitmw for echo v4: the same checks, headers,
// refusals and FailOpen/FailClosed choice, as an echo.MiddlewareFunc with
// key functions that read an echo.Context. It is a package of its own so
// that package client stays free of dependencies.
package echolimit

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/client/limitmw"
)

// Rule is one policy checked per request, for the key Key reads from the
// echo.Context; "" skips the rule for this request. Keys otpguard would
// refuse are replaced by a digest (limitmw.SafeKey).
type Rule struct {
	Policy string
	Key    func(c echo.Context) string
	Cost   int64 // default 1
}

// Middleware limits the routes it is given to by rules, checked in one
// round trip with l; the request is served only if all allow.
func Middleware(l *limitmw.Limiter, rules ...Rule) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			checks := make([]client.Check, 0, len(rules))
			for _, ru := range rules {
				if k := ru.Key(c); k != "" {
					checks = append(checks, client.Check{Policy: ru.Policy, Key: limitmw.SafeKey(k), Cost: ru.Cost})
				}
			}
			if !l.Decide(c.Request(), checks).Write(c.Response()) {
				return nil // the refusal is written
			}
			return next(c)
		}
	}
}

// RealIP keys by echo's idea of the client's address (c.RealIP(), which
// believes forwarding headers as the Echo's IPExtractor says: set one
// that trusts only your proxies), an IPv6 address by its /64.
func RealIP(c echo.Context) string { return limitmw.IPKey(c.RealIP()) }

// Route keys by the route that matched and its method (c.Path(), e.g.
// "route:POST:/items/:id"), so that a limit is per route, not per URL.
func Route(c echo.Context) string { return "route:" + c.Request().Method + ":" + c.Path() }

// Get keys by a value a previous middleware stored with c.Set (e.g. the
// signed-in user's ID: a string, an integer or a fmt.Stringer), prefix +
// value; "" (the rule skipped) when there is none.
func Get(name, prefix string) func(echo.Context) string {
	return func(c echo.Context) string {
		switch v := c.Get(name).(type) {
		case nil:
			return ""
		case string:
			if v == "" {
				return ""
			}
			return prefix + v
		case fmt.Stringer, int, int64, uint64:
			return prefix + fmt.Sprint(v)
		}
		return ""
	}
}

// Join keys by several key functions at once, joined by "/" (e.g. a user
// per route); "" when any is.
func Join(keys ...func(echo.Context) string) func(echo.Context) string {
	return func(c echo.Context) string {
		parts := make([]string, len(keys))
		for i, k := range keys {
			if parts[i] = k(c); parts[i] == "" {
				return ""
			}
		}
		return strings.Join(parts, "/")
	}
}
