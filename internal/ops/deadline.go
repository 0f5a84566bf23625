package ops

import (
	"context"
	"time"
)

// databaseDeadlineKey is the context key of WithDatabaseDeadline.
type databaseDeadlineKey struct{}

// WithDatabaseDeadline returns ctx carrying deadline for all the database
// work done with it, or ctx itself when it carries a sooner one. The SQL
// store ends each call by the sooner of this deadline and its own timeout,
// so several calls made for one request end together: an ops route with
// four SQL calls answers within one timeout, not four.
//
// It is a value, not ctx's own deadline, so that the request's Redis calls
// keep their own timing, and so that it outlives context.WithoutCancel:
// the work an ops change does after it is made (the reload, its audit
// event) stays within the request's bound.
func WithDatabaseDeadline(ctx context.Context, deadline time.Time) context.Context {
	if d, ok := DatabaseDeadline(ctx); ok && d.Before(deadline) {
		return ctx
	}
	return context.WithValue(ctx, databaseDeadlineKey{}, deadline)
}

// DatabaseDeadline returns the deadline WithDatabaseDeadline gave ctx.
func DatabaseDeadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(databaseDeadlineKey{}).(time.Time)
	return d, ok
}
