package limit

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
	return withDecisionIn(ctx, nil)
}

// decisionCtx is a context marked as one decision: the caller's, with the
// mark in the same allocation, so that marking a check allocates once.
type decisionCtx struct {
	context.Context
	d decision
}

func (c *decisionCtx) Value(key any) any {
	if _, ok := key.(decisionKey); ok {
		return &c.d
	}
	return c.Context.Value(key)
}

// withDecisionIn is WithDecision in mem's memory (nil: its own), for a
// caller that holds a decision's other state in one allocation too.
func withDecisionIn(ctx context.Context, mem *decisionCtx) context.Context {
	if _, ok := ctx.Value(decisionKey{}).(*decision); ok {
		return ctx
	}
	if mem == nil {
		mem = new(decisionCtx)
	}
	mem.Context = ctx
	return mem
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
