package ops

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// SignInLimit bounds the failed ops sign-ins (login form or ops bearer key)
// from one client address, across every instance: a guesser gets Failures
// tries per Window, then 429 until the window ends.
type SignInLimit struct {
	Failures int64
	Window   time.Duration
}

// DefaultSignInLimit is 10 failed sign-ins per address per 15 minutes.
var DefaultSignInLimit = SignInLimit{Failures: 10, Window: 15 * time.Minute}

// SignInPolicyName is the name the sign-in limit goes by in /ops/status.
const SignInPolicyName = "ops.signin"

// SignInLimiter enforces a SignInLimit on ops sign-ins, counting failures
// per client address in the shared store like every other limit.
type SignInLimiter struct {
	counter guard.Counter
	limit   SignInLimit
	log     *slog.Logger
}

// NewSignInLimiter returns a limiter counting in counter, which may be nil:
// then nothing is limited. A zero limit is DefaultSignInLimit.
func NewSignInLimiter(counter guard.Counter, limit SignInLimit, logger *slog.Logger) *SignInLimiter {
	if limit == (SignInLimit{}) {
		limit = DefaultSignInLimit
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &SignInLimiter{counter: counter, limit: limit, log: logger}
}

// Begin counts one sign-in attempt from ip before its key is
// checked, so that guesses sent at once to every instance are counted
// exactly (check first, count after would let them all through). Once the
// address has spent its failures it returns too_many_attempts with when to
// try again, and the key must not be checked. Otherwise the caller checks
// the key and calls end with the outcome: a good key gives its attempt back.
//
// While Redis is down the attempts are counted in this instance's memory,
// with the same limit. Without a counter nothing is limited.
func (s *SignInLimiter) Begin(ctx context.Context, ip string) (end func(ok bool), err error) {
	if s.counter == nil {
		return func(bool) {}, nil
	}
	l := s.limit
	subject, err := guard.IPSubject(ip)
	if err != nil || subject == "" {
		subject = "unknown" // every address echo cannot read shares one limit
	}
	take := guard.Take{
		Key: guard.Key{Space: "ops:signin", ID: subject, Name: "fails"}, Algorithm: guard.FixedWindow,
		Limit: l.Failures, Window: l.Window, Cost: 1,
		Policy: SignInPolicyName, OnStoreError: guard.FallbackLocal, LocalLimit: l.Failures,
	}
	res, err := s.counter.Take(ctx, []guard.Take{take})
	if err != nil {
		return nil, guard.StoreUnavailable(err, dbRetryAfter)
	}
	if !res[0].Allowed {
		return nil, &guard.Error{
			Code:       guard.CodeTooManyAttempts,
			Message:    fmt.Sprintf("too many failed sign-ins from this address; try again in %s", roundUp(res[0].RetryAfter)),
			RetryAfter: res[0].RetryAfter,
		}
	}
	take.Fallback = res[0].Fallback
	return func(ok bool) {
		if !ok {
			return
		}
		if err := s.counter.Refund(context.WithoutCancel(ctx), []guard.Take{take}); err != nil {
			s.log.WarnContext(ctx, "giving back a good sign-in's attempt failed; it counts until the window ends", "err", err)
		}
	}, nil
}

// roundUp shows a wait to the next whole second, never "0s".
func roundUp(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}
