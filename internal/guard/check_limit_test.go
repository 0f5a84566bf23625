package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestCheckLimitOverride: a check's own limit replaces its fixed window's, and
// is refused on a token bucket or out of range.
func TestCheckLimitOverride(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	l := guard.NewLimiter(denialPolicies(), newWindows(clk.now), nil)
	check := func(c guard.Check) (guard.Decision, error) {
		b, err := l.Check(context.Background(), []guard.Check{c})
		if err != nil {
			return guard.Decision{}, err
		}
		return b.Decisions[0], nil
	}
	// login allows 3 a minute; overridden to 1, the second hit is denied.
	for i, want := range []bool{true, false} {
		d, err := check(guard.Check{Policy: "login", Key: "u", Cost: 1, Override: true, Limit: 1})
		if err != nil || d.Allowed != want || d.Limit != 1 {
			t.Fatalf("hit %d: %+v, %v; want allowed %v, limit 1", i+1, d, err, want)
		}
	}
	for name, c := range map[string]guard.Check{
		"token bucket": {Policy: "api", Key: "u", Cost: 1, Override: true, Limit: 1},
		"negative":     {Policy: "login", Key: "v", Cost: 1, Override: true, Limit: -1},
	} {
		_, err := check(c)
		var gerr *guard.Error
		if !errors.As(err, &gerr) || gerr.Code != guard.CodeInvalidRequest {
			t.Errorf("%s: got %v, want %s", name, err, guard.CodeInvalidRequest)
		}
	}
}
