package limit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestCheckLimitOverride: a check's own limit replaces its fixed window's, and
// is refused on a token bucket or out of range.
func TestCheckLimitOverride(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	l := limit.New(denialPolicies(), newWindows(clk.now), nil)
	check := func(c limit.Check) (limit.Decision, error) {
		b, err := l.Check(context.Background(), []limit.Check{c})
		if err != nil {
			return limit.Decision{}, err
		}
		return b.Decisions[0], nil
	}
	// login allows 3 a minute; overridden to 1, the second hit is denied.
	for i, want := range []bool{true, false} {
		d, err := check(limit.Check{Policy: "login", Key: "u", Cost: 1, Override: true, Limit: 1})
		if err != nil || d.Allowed != want || d.Limit != 1 {
			t.Fatalf("hit %d: %+v, %v; want allowed %v, limit 1", i+1, d, err, want)
		}
	}
	for name, c := range map[string]limit.Check{
		"token bucket": {Policy: "api", Key: "u", Cost: 1, Override: true, Limit: 1},
		"negative":     {Policy: "login", Key: "v", Cost: 1, Override: true, Limit: -1},
	} {
		_, err := check(c)
		var gerr *problem.Error
		if !errors.As(err, &gerr) || gerr.Code != problem.CodeInvalidRequest {
			t.Errorf("%s: got %v, want %s", name, err, problem.CodeInvalidRequest)
		}
	}
}

// resultCounter is a Counter that answers every take with res, allocating
// nothing.
type resultCounter struct{ res []limit.Result }

func (c resultCounter) Take(_ context.Context, takes []limit.Take) ([]limit.Result, error) {
	return c.res[:len(takes)], nil
}

func (c resultCounter) Refund(context.Context, []limit.Take) error { return nil }

// TestCheckAllocations holds the Limiter's own work for a check of one
// limit (its take, the decision, the decision's context) to a count of
// allocations: at 10,000 checks a second each one is collector work. The store is a fake that allocates nothing.
func TestCheckAllocations(t *testing.T) {
	c := resultCounter{res: []limit.Result{{Allowed: true, Limit: 10, Remaining: 9, Spent: true}}}
	l := limit.New(map[string]limit.Policy{
		"api": {Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, OnStoreError: limit.FallbackOpen},
	}, c, nil)
	ctx := context.Background()
	checks := []limit.Check{{Policy: "api", Key: "user:42", Cost: 1}}
	allocs := testing.AllocsPerRun(200, func() {
		b, err := l.Check(ctx, checks)
		if err != nil || !b.Allowed || b.Decisions[0].Remaining != 9 {
			t.Fatalf("Check: %+v, %v", b, err)
		}
	})
	const want = 1
	if allocs > want {
		t.Errorf("got %.0f allocations per check, want at most %d", allocs, want)
	}
	t.Logf("%.0f allocations per check", allocs)
}

// clock is an injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }
