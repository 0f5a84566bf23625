package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

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

// BudgetUse reads the spend budget's windows without spending: one peek of
// each configured window, in one call through the store (and so through
// the Fallback's breaker and timeout when the store is one: an open
// breaker answers at once). The limits are those a send meets now, the
// ops desk's overrides included (Enforced); windows without one (off) are
// left out. On an error the windows are returned with Known false.
func (s *OTP) BudgetUse(ctx context.Context) ([]BudgetUse, error) {
	var (
		takes []limit.Take
		out   []BudgetUse
	)
	e := s.enforced(s.now())
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
