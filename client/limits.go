package client

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"
)

// Check is one limit check: spend Cost (default 1 when 0 is not meant;
// see Peek) of Policy for Key.
type Check struct {
	Policy string
	Key    string // 1-128 of A-Za-z0-9_.:@/+=-
	// Cost to spend; 0 means the default, 1. Set Peek to report without
	// spending.
	Cost int64
	// Peek asks with cost 0: report, spend nothing.
	Peek bool
}

func (ch Check) cost() int64 {
	switch {
	case ch.Peek:
		return 0
	case ch.Cost <= 0:
		return 1
	}
	return ch.Cost
}

// The modes of a Decision: how it was taken.
const (
	ModeExact    = "exact"    // one atomic step in Redis
	ModeSync     = "sync"     // a hot-key policy's local counter
	ModeMemory   = "memory"   // otpguard's own memory of an exact denial
	ModeFallback = "fallback" // Redis did not answer: the policy's on_store_error
	// ModeClientMemory: this client's memory of an exact denial that
	// still holds; no request was made.
	ModeClientMemory = "client_memory"
	// ModeSkipped: not asked, because another check of the batch was
	// denied from this client's memory (the batch spends nothing).
	ModeSkipped = "skipped"
)

// Decision is otpguard's answer to one check.
type Decision struct {
	Policy     string
	Key        string
	Mode       string // one of the Mode constants
	Allowed    bool
	Shadow     bool  // a shadow policy: Allowed is always true
	WouldAllow *bool // a shadow policy's real decision
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration // when a denied check may be allowed
	ResetAfter time.Duration // when the counter is whole again
}

// CheckResult is the answer to a check or a batch.
type CheckResult struct {
	// Allowed is true when every check allowed (and so every one spent).
	Allowed   bool
	Decisions []Decision
	// RetryAfter is the denying decision's, on a denial.
	RetryAfter time.Duration
	// RateLimitPolicy and RateLimit are the IETF header values
	// (draft-ietf-httpapi-ratelimit-headers) of the denying decision, or
	// of the first when all allow, as otpguard wrote them; from memory,
	// rebuilt with the time left. Empty when otpguard sent none.
	RateLimitPolicy string
	RateLimit       string
	// FromMemory is true when the answer came from the denied-key memory
	// and no request was made.
	FromMemory bool
}

// Denying returns the decision that denied the batch (the first that did
// not allow), or the first decision.
func (r *CheckResult) Denying() Decision {
	for _, d := range r.Decisions {
		if !d.Allowed {
			return d
		}
	}
	if len(r.Decisions) == 0 {
		return Decision{}
	}
	return r.Decisions[0]
}

// MaxBatch is the most checks one CheckBatch may carry (otpguard's limit).
const MaxBatch = 20

type checkItemJSON struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Cost   int64  `json:"cost"`
}

type checkBatchJSON struct {
	Checks []checkItemJSON `json:"checks"`
}

type decisionJSON struct {
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Mode         string `json:"mode"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow"`
	WouldAllow   *bool  `json:"would_allow"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	ResetAfterMs int64  `json:"reset_after_ms"`
}

type checkResponseJSON struct {
	Allowed   bool           `json:"allowed"`
	Decisions []decisionJSON `json:"decisions"`
}

// Check decides one limit check: POST /limits/check. A denial is not an
// error: the result says Allowed false, with RetryAfter.
func (c *Client) Check(ctx context.Context, ch Check) (*CheckResult, error) {
	return c.CheckBatch(ctx, ch)
}

// CheckBatch decides up to MaxBatch checks in one round trip: allowed only
// if every check allows, and a denied batch spends nothing. A check that
// this client remembers as denied answers the whole batch from memory,
// with no request (see the package documentation). Never retried: a check
// counts.
func (c *Client) CheckBatch(ctx context.Context, checks ...Check) (*CheckResult, error) {
	switch {
	case len(checks) == 0:
		return nil, fmt.Errorf("otpguard: CheckBatch: no checks")
	case len(checks) > MaxBatch:
		return nil, fmt.Errorf("otpguard: CheckBatch: %d checks, at most %d", len(checks), MaxBatch)
	}
	if res, ok := c.fromMemory(checks); ok {
		return res, nil
	}
	body := checkBatchJSON{Checks: make([]checkItemJSON, len(checks))}
	for i, ch := range checks {
		body.Checks[i] = checkItemJSON{Policy: ch.Policy, Key: ch.Key, Cost: ch.cost()}
	}
	sent := c.now()
	r, err := c.do(ctx, call{method: http.MethodPost, path: "/limits/check", body: body},
		http.StatusOK, http.StatusTooManyRequests)
	if err != nil {
		if c.memory != nil && IsCode(err, CodeStoreUnavailable) {
			c.memory.clear()
		}
		return nil, err
	}
	var resp checkResponseJSON
	if err := r.decode(&resp); err != nil {
		return nil, err
	}
	if len(resp.Decisions) != len(checks) {
		return nil, fmt.Errorf("otpguard: /limits/check answered %d decisions for %d checks", len(resp.Decisions), len(checks))
	}
	out := &CheckResult{
		Allowed: resp.Allowed, Decisions: make([]Decision, len(resp.Decisions)),
		RateLimitPolicy: r.header.Get("RateLimit-Policy"), RateLimit: r.header.Get("RateLimit"),
	}
	for i, d := range resp.Decisions {
		out.Decisions[i] = Decision{
			Policy: d.Policy, Key: d.Key, Mode: d.Mode, Allowed: d.Allowed, Shadow: d.Shadow, WouldAllow: d.WouldAllow,
			Limit: d.Limit, Remaining: d.Remaining,
			RetryAfter: time.Duration(d.RetryAfterMs) * time.Millisecond,
			ResetAfter: time.Duration(d.ResetAfterMs) * time.Millisecond,
		}
	}
	if !out.Allowed {
		out.RetryAfter = out.Denying().RetryAfter
		if out.RetryAfter == 0 {
			out.RetryAfter = retryAfter(r.header)
		}
	}
	c.remember(sent, checks, out)
	return out, nil
}

// remember keeps the exact denials of an answer (see memory.go).
func (c *Client) remember(sent time.Time, checks []Check, res *CheckResult) {
	if c.memory == nil {
		return
	}
	for _, d := range res.Decisions {
		if d.Mode == ModeFallback {
			// Redis did not answer: it may come back without the counters
			// the remembered denials stand on.
			c.memory.clear()
			return
		}
	}
	den := res.Denying()
	c.memory.notePolicy(den.Policy, res.RateLimitPolicy)
	for i, d := range res.Decisions {
		if d.Allowed || d.Shadow || d.RetryAfter <= 0 || (d.Mode != ModeExact && d.Mode != ModeMemory) {
			continue
		}
		e := denial{
			cost: checks[i].cost(),
			// Less a millisecond: otpguard rounds retry_after up to whole
			// ms, and counting from before it decided covers the rest.
			until: sent.Add(d.RetryAfter - time.Millisecond),
			limit: d.Limit, remaining: d.Remaining, reset: sent.Add(d.ResetAfter),
		}
		if d.Policy == den.Policy && d.Key == den.Key {
			e.policyHeader = res.RateLimitPolicy
		}
		if e.cost > 0 && e.until.After(sent) {
			c.memory.put(d.Policy, d.Key, e)
		}
	}
}

// fromMemory answers a batch if a remembered denial covers one of its
// checks.
func (c *Client) fromMemory(checks []Check) (*CheckResult, bool) {
	if c.memory == nil {
		return nil, false
	}
	now := c.now()
	for i, ch := range checks {
		e, ok := c.memory.get(ch.Policy, ch.Key, ch.cost(), now)
		if !ok {
			continue
		}
		res := &CheckResult{Allowed: false, FromMemory: true, Decisions: make([]Decision, len(checks))}
		for j, o := range checks {
			res.Decisions[j] = Decision{Policy: o.Policy, Key: o.Key, Mode: ModeSkipped, Allowed: true}
		}
		retry := e.until.Add(time.Millisecond).Sub(now)
		reset := max(retry, e.reset.Sub(now))
		res.Decisions[i] = Decision{
			Policy: ch.Policy, Key: ch.Key, Mode: ModeClientMemory, Allowed: false,
			Limit: e.limit, Remaining: e.remaining, RetryAfter: retry, ResetAfter: reset,
		}
		res.RetryAfter = retry
		res.RateLimitPolicy = e.policyHeader
		// As otpguard writes it on a denial: t is when the quota serves
		// again, Retry-After's figure rounded alike (up, at least 1), not
		// when it is whole again.
		res.RateLimit = fmt.Sprintf("%q;r=%d;t=%d", ch.Policy, e.remaining, max(1, int64(math.Ceil(retry.Seconds()))))
		return res, true
	}
	return nil, false
}
