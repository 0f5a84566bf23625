package guard

import (
	"context"
	"sync/atomic"
)

// decision marks a context as one decision (a request): once the store has
// failed within it, the rest of the decision does not wait on the store
// again, so a decision waits at most one timeout on a dead store.
type decision struct{ failed atomic.Bool }

type decisionKey struct{}

// WithDecision marks ctx as one decision, unless it is one already.
func WithDecision(ctx context.Context) context.Context {
	if _, ok := ctx.Value(decisionKey{}).(*decision); ok {
		return ctx
	}
	return context.WithValue(ctx, decisionKey{}, &decision{})
}

// StoreFailed reports whether the store already failed within ctx's
// decision (false outside one).
func StoreFailed(ctx context.Context) bool {
	d, _ := ctx.Value(decisionKey{}).(*decision)
	return d != nil && d.failed.Load()
}

// NoteStoreFailure marks ctx's decision as one the store failed in; outside
// a decision it does nothing.
func NoteStoreFailure(ctx context.Context) {
	if d, _ := ctx.Value(decisionKey{}).(*decision); d != nil {
		d.failed.Store(true)
	}
}
