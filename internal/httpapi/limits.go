package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/problem"
)

type checkItem struct {
	Policy string    `json:"policy"`
	Key    string    `json:"key"`
	Cost   costField `json:"cost"` // default 1; 0 peeks
}

// checkRequest is one check written inline, or a batch under "checks".
// (Not an embedded checkItem: the decoder would name a bad field
// "checkItem.key" to the caller.)
type checkRequest struct {
	Policy string      `json:"policy"`
	Key    string      `json:"key"`
	Cost   costField   `json:"cost"`
	Checks []checkItem `json:"checks"`
}

// costField is a check's cost as sent. Anything but a whole number (1.5,
// "1", 1e30) is kept as bad, so that it is refused like a negative cost,
// 422 invalid_cost, instead of as malformed JSON.
type costField struct {
	set bool
	n   int64
	bad string
}

func (c *costField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as if absent: the default cost
	}
	c.set = true
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		c.bad = string(b[:min(len(b), 32)])
		return nil
	}
	c.n = n
	return nil
}

// value is the cost to spend: 1 when absent.
func (c costField) value() (int64, error) {
	switch {
	case c.bad != "":
		return 0, problem.Errorf(problem.CodeInvalidCost, "cost must be a whole number of at least 0, got %s", c.bad)
	case !c.set:
		return 1, nil
	}
	return c.n, nil
}

type decisionJSON struct {
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Mode         string `json:"mode"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow,omitempty"`
	WouldAllow   *bool  `json:"would_allow,omitempty"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	ResetAfterMs int64  `json:"reset_after_ms"`
}

type checkResponse struct {
	Allowed   bool           `json:"allowed"`
	Decisions []decisionJSON `json:"decisions"`
}

// limitHandlers are the handlers of POST /limits/check: the limiter in
// force, the decisions' metrics, and the buffers of the hot path
// (limits_json.go).
type limitHandlers struct {
	live    *atomic.Pointer[Services]
	metrics *metrics.Set
	bufs    bufPool
}

// checkLimits: POST /limits/check. Decides one check or a batch in one
// round trip to Redis; 200 when allowed, 429 (same body) when not.
func (l *limitHandlers) checkLimits(c echo.Context) error {
	var req checkRequest
	body := l.bufs.get()
	err := httpx.DecodeJSONInto(c, &req, body)
	l.bufs.put(body)
	if err != nil {
		return err
	}
	lim, batch, err := l.decideChecks(c.Request().Context(), &req)
	if err != nil {
		return err
	}
	h := c.Response().Header()
	if pol, fields, ok := rateLimitFields(lim, batch.Denying()); ok {
		v := []string{pol, fields}
		h["Ratelimit-Policy"] = v[0:1:1] // textproto.CanonicalMIMEHeaderKey("RateLimit-Policy")
		h["Ratelimit"] = v[1:2:2]
	}
	status := http.StatusOK
	if !batch.Allowed {
		status = http.StatusTooManyRequests
		h.Set("Retry-After", strconv.Itoa(httpx.RetrySeconds(batch.Denying().RetryAfter)))
	}
	if c.Request().URL.RawQuery != "" || c.Echo().Debug { // ?pretty: echo indents
		return c.JSON(status, checkResponseOf(batch))
	}
	buf := l.bufs.get()
	defer l.bufs.put(buf)
	*buf = appendCheckResponse(*buf, batch)
	return c.JSONBlob(status, *buf)
}

// decideChecks decides a decoded /limits/check request and counts its
// decisions in the metrics: the limiter (one
// policy for the whole request) and the batch, or the error to answer.
func (l *limitHandlers) decideChecks(ctx context.Context, req *checkRequest) (*limit.Limiter, limit.Batch, error) {
	items := req.Checks
	inline := req.Policy != "" || req.Key != "" || req.Cost.set
	// One check, the common case, is decided from an array on the stack:
	// no slice of items nor of checks made for it.
	var one [1]limit.Check
	checks := one[:]
	switch {
	case inline && items != nil:
		return nil, limit.Batch{}, problem.Errorf(problem.CodeInvalidRequest, "send either one check (policy, key, cost) or a batch (checks), not both")
	case inline:
		cost, err := req.Cost.value()
		if err != nil {
			return nil, limit.Batch{}, err
		}
		one[0] = limit.Check{Policy: req.Policy, Key: req.Key, Cost: cost}
	default:
		checks = make([]limit.Check, len(items))
		for i, it := range items {
			cost, err := it.Cost.value()
			if err != nil {
				return nil, limit.Batch{}, err
			}
			checks[i] = limit.Check{Policy: it.Policy, Key: it.Key, Cost: cost}
		}
	}
	lim := l.live.Load().Limiter
	batch, err := lim.Check(ctx, checks)
	if err != nil {
		l.metrics.Decision(metrics.PolicyBatch, metrics.Outcome(err))
		if inline {
			return nil, limit.Batch{}, asSent(err)
		}
		return nil, limit.Batch{}, err
	}
	for _, d := range batch.Decisions {
		o := "allowed"
		if !d.WouldAllow {
			o = string(problem.CodeRateLimited)
		}
		l.metrics.Decision(d.Policy, o)
		if d.Mode == limit.ModeMemory {
			l.metrics.FromMemory(d.Policy)
		}
	}
	return lim, batch, nil
}

// checkResponseOf is the answer as a value, for echo's encoder
// (appendCheckResponse writes the same bytes without it).
func checkResponseOf(batch limit.Batch) checkResponse {
	resp := checkResponse{Allowed: batch.Allowed, Decisions: make([]decisionJSON, len(batch.Decisions))}
	for i, d := range batch.Decisions {
		resp.Decisions[i] = decisionJSON{
			Policy: d.Policy, Key: d.Key, Mode: string(d.Mode), Allowed: d.Allowed, Shadow: d.Shadow,
			Limit: d.Limit, Remaining: d.Remaining,
			RetryAfterMs: ceilMs(d.RetryAfter), ResetAfterMs: ceilMs(d.ResetAfter),
		}
		if d.Shadow {
			would := d.WouldAllow
			resp.Decisions[i].WouldAllow = &would
		}
	}
	return resp
}

// rateLimitFields are the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) for one decision: quota q per
// window w seconds, r remaining, t seconds until the quota is whole again;
// on a denial, t is the Retry-After (for a token bucket, when enough
// tokens are back; the bucket is whole only later).
func rateLimitFields(lim *limit.Limiter, d limit.Decision) (policy, fields string, ok bool) {
	p, ok := lim.Policy(d.Policy)
	if !ok {
		return "", "", false
	}
	var w time.Duration
	if p.Algorithm == limit.TokenBucket {
		w = time.Duration(float64(p.Capacity) / p.RefillPerSecond * float64(time.Second))
	} else {
		w = p.Window
	}
	// Appended, not fmt.Sprintf'd (%q is strconv.Quote), under the keys'
	// canonical forms, so Set need not canonicalise them on every request;
	// both fields in one string and both values in one slice.
	var b [192]byte
	pol := strconv.AppendQuote(b[:0], d.Policy)
	q := append(pol, ";q="...)
	q = strconv.AppendInt(q, d.Limit, 10)
	q = append(q, ";w="...)
	q = strconv.AppendInt(q, max(1, int64(math.Ceil(w.Seconds()))), 10)
	n := len(q)
	r := append(q, pol...)
	r = append(r, ";r="...)
	r = strconv.AppendInt(r, d.Remaining, 10)
	r = append(r, ";t="...)
	t := int64(math.Ceil(d.ResetAfter.Seconds()))
	if !d.Allowed { // when the quota serves again: Retry-After's figure, rounded alike
		t = int64(httpx.RetrySeconds(d.RetryAfter))
	}
	r = strconv.AppendInt(r, t, 10)
	both := string(r)
	return both[:n], both[n:], true
}

func ceilMs(d time.Duration) int64 {
	return (int64(d) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// asSent names the fields of a refused single check as the request has
// them (policy, key, cost), not as the batch's first item (checks[0].key)
// the limiter sees.
func asSent(err error) error {
	e, ok := errors.AsType[*problem.Error](err)
	if !ok || !strings.HasPrefix(e.Message, "checks[0]") {
		return err
	}
	c := *e
	c.Message = strings.TrimPrefix(e.Message, "checks[0]")
	c.Message = strings.TrimPrefix(strings.TrimPrefix(c.Message, "."), ": ")
	return &c
}

// bufPool keeps the buffers of answers and request bodies.
type bufPool struct{ p sync.Pool }

// largest buffer kept: a full batch's answer or body is a few KiB.
const maxPooledBuf = 64 << 10

func (b *bufPool) get() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		*v = (*v)[:0]
		return v
	}
	buf := make([]byte, 0, 1024)
	return &buf
}

func (b *bufPool) put(buf *[]byte) {
	if cap(*buf) <= maxPooledBuf {
		b.p.Put(buf)
	}
}
