// Package limitmw limits net/http requests with otpguard: each request is
// checked against one or more policies, keyed by what a key function
// reads from it (the client's address, a user ID, the route), in one
// round trip. It writes the RateLimit, RateLimit-Policy and Retry-After
// headers in otpguard's own format, answers a denial with 429 problem
// details, and applies a declared choice, FailOpen or FailClosed, when
// otpguard gives no decision within the per-check timeout.
//
// A key denied with a retry time is remembered by the client until that
// time (client.WithDenialMemory), so a client hammering a denied limit
// costs no round trip to otpguard; the client package documentation says
// why that stays exact.
//
// The echo v4 adapter is package client/echolimit.
package limitmw

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/client"
)

// Failure is what to do when otpguard gives no decision in time.
type Failure int

const (
	// FailOpen lets the request through, without RateLimit headers: an
	// outage of otpguard does not take the app down with it.
	FailOpen Failure = iota + 1
	// FailClosed refuses the request with 503 limiter_unavailable: an
	// outage of otpguard lifts no limit.
	FailClosed
)

func (f Failure) String() string {
	switch f {
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	}
	return "Failure(" + strconv.Itoa(int(f)) + ")"
}

// Options tune a Limiter.
type Options struct {
	// OnUnavailable is the declared choice when otpguard gives no
	// decision: no answer within Timeout, a 5xx, or an answer that is no
	// decision (a 4xx: a policy otpguard does not have, a wrong API key).
	// Required.
	OnUnavailable Failure
	// Timeout is the budget of one check, round trip included (default
	// DefaultTimeout). A request's own deadline, when nearer, wins.
	Timeout time.Duration
	// OnError, when set, is told every failure OnUnavailable was applied
	// to, e.g. to log it or count it.
	OnError func(r *http.Request, err error)
	// RetryAfter is what a FailClosed refusal says (default 5 s).
	RetryAfter time.Duration
}

// DefaultTimeout is the budget of one check unless Options.Timeout says
// otherwise: a few round trips on a local network.
const DefaultTimeout = 100 * time.Millisecond

// Limiter decides requests with a client of otpguard. It is safe for
// concurrent use; share one per process (its client's denied-key memory
// is then shared too).
type Limiter struct {
	c    *client.Client
	opts Options
}

// New returns a Limiter asking c. It fails when opts declares no
// OnUnavailable choice.
func New(c *client.Client, opts Options) (*Limiter, error) {
	if opts.OnUnavailable != FailOpen && opts.OnUnavailable != FailClosed {
		return nil, fmt.Errorf("limitmw: declare Options.OnUnavailable: FailOpen or FailClosed")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = 5 * time.Second
	}
	return &Limiter{c: c, opts: opts}, nil
}

// Rule is one policy checked per request, for the key Key reads from it.
type Rule struct {
	Policy string
	// Key returns the request's key for Policy; "" skips the rule for
	// this request (e.g. no user signed in). A key otpguard would refuse
	// (more than 128 characters, or characters outside
	// A-Za-z0-9_.:@/+=-) is replaced by a digest of it (SafeKey).
	Key func(r *http.Request) string
	// Cost spent per request (default 1).
	Cost int64
}

// Handler limits next by rules: every rule is checked in one round trip,
// and the request is served only if all allow.
func (l *Limiter) Handler(next http.Handler, rules ...Rule) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks := make([]client.Check, 0, len(rules))
		for _, ru := range rules {
			if k := ru.Key(r); k != "" {
				checks = append(checks, client.Check{Policy: ru.Policy, Key: SafeKey(k), Cost: ru.Cost})
			}
		}
		v := l.Decide(r, checks)
		if v.Write(w) {
			next.ServeHTTP(w, r)
		}
	})
}

// Middleware is Handler as a func(http.Handler) http.Handler, for routers
// that chain middleware.
func (l *Limiter) Middleware(rules ...Rule) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return l.Handler(next, rules...) }
}

// Verdict is a Limiter's decision on one request.
type Verdict struct {
	// Allowed: serve the request.
	Allowed bool
	// Result is otpguard's answer (or the memory's); nil when it gave
	// none or no rule applied.
	Result *client.CheckResult
	// Err is why otpguard gave no decision; OnUnavailable was applied.
	Err        error
	failure    Failure
	retryAfter time.Duration
}

// Decide checks checks for r within the Limiter's timeout. Adapters for
// other routers call it and then Write.
func (l *Limiter) Decide(r *http.Request, checks []client.Check) Verdict {
	if len(checks) == 0 {
		return Verdict{Allowed: true}
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.opts.Timeout)
	defer cancel()
	res, err := l.c.CheckBatch(ctx, checks...)
	if err != nil {
		if l.opts.OnError != nil {
			l.opts.OnError(r, err)
		}
		return Verdict{Allowed: l.opts.OnUnavailable == FailOpen, Err: err, failure: l.opts.OnUnavailable, retryAfter: l.opts.RetryAfter}
	}
	return Verdict{Allowed: res.Allowed, Result: res}
}

// Write sets the RateLimit headers on w and, when the request is refused,
// writes the refusal: 429 rate_limited with Retry-After, or 503
// limiter_unavailable when otpguard gave no decision and the choice is
// FailClosed. It reports whether to serve the request.
func (v Verdict) Write(w http.ResponseWriter) bool {
	h := w.Header()
	if v.Result != nil {
		if v.Result.RateLimitPolicy != "" {
			h.Set("RateLimit-Policy", v.Result.RateLimitPolicy)
		}
		if v.Result.RateLimit != "" {
			h.Set("RateLimit", v.Result.RateLimit)
		}
	}
	if v.Allowed {
		return true
	}
	if v.Result == nil { // no decision, FailClosed
		writeProblem(w, http.StatusServiceUnavailable, "limiter_unavailable",
			"the rate limiter did not answer; try again shortly", retrySeconds(v.retryAfter), "")
		return false
	}
	d := v.Result.Denying()
	s := retrySeconds(v.Result.RetryAfter)
	writeProblem(w, http.StatusTooManyRequests, "rate_limited",
		fmt.Sprintf("too many requests; try again in %d s", s), s, d.Policy)
	return false
}

// problem is the 429/503 body: RFC 9457 problem details as otpguard
// writes them, with the denying policy.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Code       string `json:"code"`
	RetryAfter int    `json:"retry_after"`
	Policy     string `json:"policy,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, code, detail string, retry int, policy string) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(retry))
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{
		Type: "urn:otpguard:problem:" + code, Title: http.StatusText(status), Status: status,
		Detail: detail, Code: code, RetryAfter: retry, Policy: policy,
	})
}

// retrySeconds rounds up, and to at least 1: "0" would bring the client
// straight back.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// SafeKey returns k when otpguard takes it as a key (1-128 of
// A-Za-z0-9_.:@/+=-), else "h:" and a digest of it: distinct inputs stay
// distinct keys, and nothing the user sent reaches otpguard as written.
func SafeKey(k string) string {
	if len(k) > 0 && len(k) <= 128 {
		ok := true
		for i := 0; i < len(k) && ok; i++ {
			c := k[i]
			ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
				c == '_' || c == '.' || c == ':' || c == '@' || c == '/' || c == '+' || c == '=' || c == '-'
		}
		if ok {
			return k
		}
	}
	sum := sha256.Sum256([]byte(k))
	return "h:" + base64.RawURLEncoding.EncodeToString(sum[:18])
}

// ClientIP keys by the peer's address, "ip:<addr>", an IPv6 address by
// its /64 (one subscriber's whole prefix). It believes no forwarding
// header: behind a proxy, key by what your proxy set and you trust
// (IPKey).
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return IPKey(host)
}

// IPKey is the key of an address as ClientIP makes it; "" when s is not
// an address.
func IPKey(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return ""
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

// Header keys by a request header's value, prefix + value; a request
// without it skips the rule.
func Header(name, prefix string) func(*http.Request) string {
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if v == "" {
			return ""
		}
		return prefix + v
	}
}

// Route keys by the route pattern that matched (http.ServeMux's
// r.Pattern, e.g. "GET /items/{id}"), so that a limit is per route, not
// per URL. It needs the middleware inside the mux's handler for the
// pattern to be known; "" (the rule skipped) otherwise.
func Route(r *http.Request) string {
	if r.Pattern == "" {
		return ""
	}
	return "route:" + r.Pattern
}

// Join keys by several key functions at once, joined by "/" (e.g. a
// user per route); "" when any is.
func Join(keys ...func(*http.Request) string) func(*http.Request) string {
	return func(r *http.Request) string {
		out := ""
		for i, k := range keys {
			v := k(r)
			if v == "" {
				return ""
			}
			if i > 0 {
				out += "/"
			}
			out += v
		}
		return out
	}
}
