package guard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// Budget keys: one hash tag for both, so they share a slot on Cluster.
var (
	budgetHourKey = limit.Key{Space: "otp:budget", ID: "global", Name: "hour"}
	budgetDayKey  = limit.Key{Space: "otp:budget", ID: "global", Name: "day"}
)

// budget is the spend budget's bookkeeping beside its limits (which are
// abuse limits, enforced.go): the log of its exhaustion, and its use.
type budget struct {
	policy    OTPPolicy
	overrides Overrides
	counter   limit.Counter // use's peek
	hooks     AbuseHooks
	log       *slog.Logger
	now       func() time.Time

	mu sync.Mutex
	// exhaustedUntil is, per budget window, the end of the exhaustion
	// period this instance has already logged.
	exhaustedUntil map[string]time.Time
}

// BudgetUse is one window of the spend budget (otp.budget) as the shared
// store counts it.
type BudgetUse struct {
	Window string // "hour" or "day"
	// Limit is the limit in force: the policy file's, or an emergency
	// override's when that is tighter (Override true).
	Limit    int64
	Override bool
	// Used is what the window has counted; Known is false when the store
	// could not say (the fallback answered: its figures are this instance's
	// own, not the budget's).
	Used  int64
	Known bool
	// ResetAfter is how long until the window ends (the whole window when
	// nothing was sent in it yet).
	ResetAfter time.Duration
}

// use reads the spend budget's windows without spending: one peek of
// each configured window, in one call through the store (and so through
// the Fallback's breaker and timeout when the store is one: an open
// breaker answers at once). The limits are those a send meets now, the
// ops desk's overrides included (Enforced); windows without one (off) are
// left out. On an error the windows are returned with Known false.
func (s *budget) use(ctx context.Context) ([]BudgetUse, error) {
	var (
		takes []limit.Take
		out   []BudgetUse
	)
	e := EnforcedAt(s.policy, s.overrides, s.now())
	for _, key := range []limit.Key{budgetHourKey, budgetDayKey} {
		l := e.Budget(key.Name)
		if l.Limit <= 0 {
			continue
		}
		// No policy and closed: a failed read is an error, never a figure
		// from memory, and it neither counts as a fallback decision nor
		// moves the OTP policy in or out of fallback.
		takes = append(takes, limit.Take{Key: key, Algorithm: limit.FixedWindow, Limit: l.Limit, Window: l.Window, Cost: 0,
			OnStoreError: limit.FallbackClosed})
		out = append(out, BudgetUse{Window: key.Name, Limit: l.Limit, Override: l.Override})
	}
	if len(takes) == 0 {
		return nil, nil
	}
	res, err := s.counter.Take(ctx, takes)
	if err == nil && len(res) != len(takes) {
		err = fmt.Errorf("otp: store answered %d results for %d takes", len(res), len(takes))
	}
	if err != nil {
		return out, err
	}
	for i, r := range res {
		if r.Fallback {
			continue
		}
		out[i].Used, out[i].Known, out[i].ResetAfter = r.Count, true, r.ResetAfter
	}
	return out, nil
}

// refused counts a refusal by the budget and logs one error per
// exhaustion period (per window, on this instance), not one per request.
// A service's own budget (servicepolicy.go) refuses that service only: it
// is logged once per period as a warning, and not counted as the
// deployment's.
func (s *budget) refused(ctx context.Context, k limit.Key, res limit.Result) {
	own := k.ID != budgetHourKey.ID
	if h := s.hooks.BudgetRefused; h != nil && !own {
		h(k.Name)
	}
	now, period := s.now(), k.Name
	if own {
		period = k.ID + "/" + k.Name
	}
	s.mu.Lock()
	first := !now.Before(s.exhaustedUntil[period])
	if first {
		s.exhaustedUntil[period] = now.Add(res.RetryAfter)
	}
	s.mu.Unlock()
	if first && own {
		s.log.WarnContext(ctx, "a service's own SMS budget is spent: refusing its sends until the window ends",
			"budget", k.ID, "window", k.Name, "limit", res.Limit, "retry_after", res.RetryAfter.Round(time.Second).String())
		return
	}
	if first {
		s.log.ErrorContext(ctx, "SMS BUDGET EXHAUSTED: refusing every send until the window ends",
			"window", k.Name, "limit", res.Limit, "retry_after", res.RetryAfter.Round(time.Second).String())
	}
}
