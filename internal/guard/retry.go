package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// newCodeIn is how long until a new code may be sent to phone as far as the
// number's own limits say: its cooldown and its per-number window, read
// without spending (one call, the keys share the number's slot), as
// service's policy sets them. The
// per-IP and shared limits are the caller's and everyone's, not the
// number's, and are not read. When the store cannot say, the cooldown is
// the answer: the longest a cooldown can still run.
func (s *codebook) newCodeIn(ctx context.Context, phone Phone) time.Duration {
	p := s.policies.of(phone.service)
	takes := []limit.Take{{Key: phoneSendsKey(phone), Algorithm: limit.FixedWindow,
		Limit: p.PerPhone.Limit, Window: p.PerPhone.Window}}
	if cd := p.Cooldown; cd > 0 {
		takes = append(takes, limit.Take{Key: cooldownKey(phone), Algorithm: limit.FixedWindow, Limit: 1, Window: cd})
	}
	res, err := s.counter.Take(ctx, takes) // cost 0: peeks; no policy, closed: no fallback figures
	if err == nil && len(res) != len(takes) {
		err = fmt.Errorf("otp: store answered %d results for %d takes", len(res), len(takes))
	}
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "reading the send limits for a locked code failed", "phone", MaskPhone(phone.E164), "err", err)
		return p.Cooldown
	}
	var wait time.Duration
	for _, r := range res {
		if r.Count >= r.Limit { // the next send would pass the limit
			wait = max(wait, r.ResetAfter)
		}
	}
	return wait
}

// tooManyAttempts is the refusal of a guess at a locked code: it says when
// a new code may be requested, and its RetryAfter says the same.
func (s *codebook) tooManyAttempts(ctx context.Context, phone Phone) *problem.Error {
	wait := s.newCodeIn(ctx, phone)
	if wait <= 0 {
		return &problem.Error{Code: problem.CodeTooManyAttempts, Message: "too many wrong guesses; request a new code"}
	}
	return &problem.Error{Code: problem.CodeTooManyAttempts, RetryAfter: wait,
		Message: fmt.Sprintf("too many wrong guesses; a new code may be requested in %d s", problem.RetrySeconds(wait))}
}
