package guard

import (
	"context"
	"fmt"
	"time"
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

// BeginSignIn counts one sign-in attempt from ip before its key is
// checked, so that guesses sent at once to every instance are counted
// exactly (check first, count after would let them all through). Once the
// address has spent its failures it returns too_many_attempts with when to
// try again, and the key must not be checked. Otherwise the caller checks
// the key and calls end with the outcome: a good key gives its attempt back.
//
// While Redis is down the attempts are counted in this instance's memory,
// with the same limit. Without a Counter (OpsOptions) nothing is limited.
func (o *Ops) BeginSignIn(ctx context.Context, ip string) (end func(ok bool), err error) {
	if o.o.Counter == nil {
		return func(bool) {}, nil
	}
	l := o.o.SignIn
	subject, err := IPSubject(ip)
	if err != nil || subject == "" {
		subject = "unknown" // every address echo cannot read shares one budget
	}
	take := Take{
		Key: Key{Space: "ops:signin", ID: subject, Name: "fails"}, Algorithm: FixedWindow,
		Limit: l.Failures, Window: l.Window, Cost: 1,
		Policy: SignInPolicyName, OnStoreError: FailLocal, LocalLimit: l.Failures,
	}
	res, err := o.o.Counter.Take(ctx, []Take{take})
	if err != nil {
		return nil, StoreUnavailable(err, dbRetryAfter)
	}
	if !res[0].Allowed {
		return nil, &Error{
			Code:       CodeTooManyAttempts,
			Message:    fmt.Sprintf("too many failed sign-ins from this address; try again in %s", roundUp(res[0].RetryAfter)),
			RetryAfter: res[0].RetryAfter,
		}
	}
	take.Fallback = res[0].Fallback
	return func(ok bool) {
		if !ok {
			return
		}
		if err := o.o.Counter.Refund(context.WithoutCancel(ctx), []Take{take}); err != nil {
			o.o.Logger.WarnContext(ctx, "giving back a good sign-in's attempt failed; it counts until the window ends", "err", err)
		}
	}, nil
}

// roundUp shows a wait to the next whole second, never "0s".
func roundUp(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}
