package sqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/ops"
)

// Each call ends by the sooner of its own timeout and the deadline of the
// request's database work, so that the calls of one ops route end together.
func TestSQLBoundTakesTheRequestDeadline(t *testing.T) {
	const timeout = 3 * time.Second
	s := &SQL{timeout: timeout}
	soon := time.Now().Add(500 * time.Millisecond)
	tests := []struct {
		name string
		ctx  context.Context
		want func(before time.Time) (lo, hi time.Time)
	}{
		{"no request deadline: the call's timeout", context.Background(),
			func(b time.Time) (time.Time, time.Time) { return b.Add(timeout), time.Now().Add(timeout) }},
		{"a sooner request deadline", ops.WithDatabaseDeadline(context.Background(), soon),
			func(time.Time) (time.Time, time.Time) { return soon, soon }},
		{"a later request deadline: the call's timeout", ops.WithDatabaseDeadline(context.Background(), time.Now().Add(time.Hour)),
			func(b time.Time) (time.Time, time.Time) { return b.Add(timeout), time.Now().Add(timeout) }},
		{"the request deadline kept through WithoutCancel", context.WithoutCancel(ops.WithDatabaseDeadline(context.Background(), soon)),
			func(time.Time) (time.Time, time.Time) { return soon, soon }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			ctx, cancel := s.bound(tt.ctx)
			defer cancel()
			got, ok := ctx.Deadline()
			lo, hi := tt.want(before)
			if !ok || got.Before(lo) || got.After(hi) {
				t.Errorf("deadline %v (%v), want between %v and %v", got, ok, lo, hi)
			}
		})
	}
}
