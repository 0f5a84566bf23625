package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// SignInLimit bounds the failed sign-ins (a wrong ops key by form or
// bearer, or a wrong API key) from one client address, across every
// instance: a guesser gets Failures tries per Window, then 429 until the
// window ends.
type SignInLimit struct {
	Failures int64
	Window   time.Duration
}

// DefaultSignInLimit is 10 failed sign-ins per address per 15 minutes.
var DefaultSignInLimit = SignInLimit{Failures: 10, Window: 15 * time.Minute}

// DefaultAPIKeyLimit is 10 wrong API keys per address per minute: the
// callers are servers, so a stale key shows at once and is retried often.
var DefaultAPIKeyLimit = SignInLimit{Failures: 10, Window: time.Minute}

// The names the limits go by in /ops/status.
const (
	SignInPolicyName = "ops.signin"
	APIKeyPolicyName = "api.keys"
)

// SignInLimiter enforces a SignInLimit, counting failures per client
// address in the shared store like every other limit. One limiter counts
// ops keys (NewSignInLimiter), another API keys (NewAPIKeyLimiter).
type SignInLimiter struct {
	counter limit.Counter
	limit   SignInLimit
	space   string // of the counter's key
	policy  string
	what    string // in the refusal: "failed sign-ins", "wrong API keys"
	// suspects, when set, are the addresses this instance has seen send a
	// wrong key within the window: only their right keys are looked up in
	// the store (see NewAPIKeyLimiter).
	suspects *expirable.LRU[string, struct{}]
}

// maxSuspects bounds the addresses an API-key limiter remembers; one
// forgotten costs at most one unchecked right key.
const maxSuspects = 100_000

// NewSignInLimiter returns the limiter of ops sign-ins, counting in
// counter, which may be nil: then nothing is limited. A zero limit is
// DefaultSignInLimit.
func NewSignInLimiter(counter limit.Counter, limit SignInLimit) *SignInLimiter {
	if limit == (SignInLimit{}) {
		limit = DefaultSignInLimit
	}
	return &SignInLimiter{counter: counter, limit: limit, space: "ops:signin", policy: SignInPolicyName, what: "failed sign-ins"}
}

// NewAPIKeyLimiter returns the limiter of wrong API keys, as
// NewSignInLimiter; a zero limit is DefaultAPIKeyLimit.
//
// Wrong keys are counted exactly, as ops keys are. A right key, though, is
// every request of the API: looking its address up would double the round
// trips of every decision. So a right key is looked up only from an address
// this instance has seen send a wrong key within the window; an address
// that has spent its wrong keys has sent them somewhere, and each instance
// that saw one refuses its right keys too. A guesser's right guess can slip
// through only as the first key an instance compares from that address in
// the window: at most one per instance per window beyond the limit.
func NewAPIKeyLimiter(counter limit.Counter, limit SignInLimit) *SignInLimiter {
	if limit == (SignInLimit{}) {
		limit = DefaultAPIKeyLimit
	}
	return &SignInLimiter{counter: counter, limit: limit, space: "api:keys", policy: APIKeyPolicyName, what: "wrong API keys",
		suspects: expirable.NewLRU[string, struct{}](maxSuspects, nil, limit.Window)}
}

// Limit is the limit enforced.
func (s *SignInLimiter) Limit() SignInLimit { return s.limit }

// Admit decides one attempt from ip whose key the caller has compared (in
// constant time) and found ok or not, in one atomic step in the shared
// store, before the outcome is acted on:
//
//   - a wrong key is counted (one fixed-window hit) and may be answered as
//     wrong only while the count is within Failures: guesses sent at once
//     to every instance are counted exactly, and no more than Failures of
//     them per window are ever answered;
//   - a right key spends nothing (the window is only read), but is refused
//     too once the address has spent its failures, so a locked-out guesser
//     learns nothing from a right guess either. Spending nothing, many
//     concurrent good requests from one address never crowd each other out.
//
// A refusal is too_many_attempts with when to try again. last reports the
// wrong key that spent the address's last failure of the window: one per
// address and window across instances (per instance while the store is
// down), for a summary in the audit trail.
//
// While the store is down the attempts are counted in this instance's
// memory, with the same limit. Without a counter nothing is limited.
func (s *SignInLimiter) Admit(ctx context.Context, ip string, ok bool) (last bool, err error) {
	if s.counter == nil {
		return false, nil
	}
	l := s.limit
	subject, err := guard.IPSubject(ip)
	if err != nil || subject == "" {
		subject = "unknown" // every address echo cannot read shares one limit
	}
	if s.suspects != nil {
		if ok && !s.suspects.Contains(subject) {
			return false, nil
		}
		if !ok {
			s.suspects.Add(subject, struct{}{})
		}
	}
	take := limit.Take{
		Key: limit.Key{Space: s.space, ID: subject, Name: "fails"}, Algorithm: limit.FixedWindow,
		Limit: l.Failures, Window: l.Window, Cost: 1,
		Policy: s.policy, OnStoreError: limit.FallbackLocal, LocalLimit: l.Failures,
	}
	if ok {
		take.Cost = 0 // a peek
	}
	res, err := s.counter.Take(ctx, []limit.Take{take})
	if err != nil {
		return false, limit.StoreUnavailable(err, dbRetryAfter)
	}
	r := res[0]
	if !r.Allowed || (ok && r.Remaining <= 0) {
		wait := r.RetryAfter
		if wait <= 0 {
			wait = r.ResetAfter
		}
		return false, &problem.Error{
			Code:       problem.CodeTooManyAttempts,
			Message:    fmt.Sprintf("too many %s from this address; try again in %s", s.what, roundUp(wait)),
			RetryAfter: wait,
		}
	}
	return !ok && r.Count == l.Failures, nil
}

// roundUp shows a wait to the next whole second, never "0s".
func roundUp(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}
