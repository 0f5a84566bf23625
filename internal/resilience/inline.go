package resilience

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// Abandoner is a Counter that says which of its Takes can be abandoned:
// TakeAbandons(takes) reports whether Take(ctx, takes) returns as soon as
// ctx ends or its waiter gives up on it (guard.GiveUp(ctx) is closed), the
// store's work going on without it (store.Redis: the /limits/check script
// calls, through a running Coalescer).
//
// The Fallback waits for such a call on the caller's own goroutine and
// ends it by closing its give-up channel (waitInline): no derived
// context, one timer, and the probe looked at again while it runs. Every
// other call (a MULTI/EXEC, a plain go-redis command: once written,
// go-redis reads its reply until a deadline, whatever a cancellation says)
// runs on the caller's goroutine too, held to one deadline chosen by the
// probe's verdict as it starts (waitBounded). A Counter that is no
// Abandoner has all its calls waited for so.
type Abandoner interface {
	TakeAbandons(takes []limit.Take) bool
}

// The causes with which waitInline ends a call.
var (
	errUnvouched = errors.New("resilience: past the timeout, and the probe does not vouch for redis")
	errCeiling   = errors.New("resilience: past the ceiling")
)

// waitInline is wait for a call that returns as soon as its context ends
// or its waiter gives up on it (guard.GiveUp): fn runs here, under a
// context that carries a give-up channel one timer closes. The timer
// fires at the timeout and, while the probe vouches for Redis, again every
// half probe round, up to the ceiling; it gives up on the call when the
// probe stops vouching (a store failure) or at the ceiling
// (shed). The verdicts and counters are waitBounded's.
//
// No context is derived from ctx: deriving one registers with the
// caller's context and removes itself again on every call, a cost on the
// hottest path. The caller's own end still reaches the call through
// ctx.Done.
func (c *calls) waitInline(ctx context.Context, n *node, fn func(ctx context.Context) error) error {
	w := c.startWait(n)
	err := fn(&inlineCtx{Context: ctx, ceiling: w.start.Add(c.ceiling), giveUp: w.giveUp})
	late, cause := c.endWait(w)
	switch {
	case err == nil:
		return c.settle(ctx, n, nil, late)
	case ctx.Err() != nil:
		return ctx.Err() // the caller went
	case cause == errUnvouched:
		return c.unvouched()
	case cause == errCeiling:
		if late {
			c.late.Add(1)
		}
		return c.overloaded(context.DeadlineExceeded)
	}
	return c.settle(ctx, n, err, late)
}

// inlineCtx is a waitInline call's context: the caller's, with the
// give-up channel its timer closes (guard.GiveUp) and the ceiling as its
// deadline (or the caller's, if earlier). The deadline is not for the
// Coalescer, which leaves on the channel, but for what sees the context on
// the way to it: store's timeoutHook gives a context without a deadline
// one of its own, a WithTimeout and a runtime timer per command, the very
// cost this path saves.
type inlineCtx struct {
	context.Context
	ceiling time.Time
	giveUp  <-chan struct{}
}

func (c *inlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.ceiling) {
		return d, true
	}
	return c.ceiling, true
}

func (c *inlineCtx) Value(key any) any {
	if _, ok := key.(guard.GiveUpKey); ok {
		return c.giveUp
	}
	return c.Context.Value(key)
}

// inlineWait is the timer of one waitInline call and what it saw. It is
// kept for the next call, with its timer (made once, stopped) and its
// give-up channel (still open), when its timer never fired: a timer that
// fired may have its function still to run, which must never meet the
// next call.
type inlineWait struct {
	c      *calls
	t      *time.Timer   // runs fire
	giveUp chan struct{} // closed by fire, with cause set

	mu    sync.Mutex // over all below: fire runs on a goroutine of its own
	n     *node
	cause error // why fire gave up on the call; nil while it has not
	start time.Time
	late  bool // waited for past the timeout, Redis vouched for
	over  bool // the call returned: the timer has nothing more to do
}

// startWait arms a kept or new inlineWait for a call on n.
func (c *calls) startWait(n *node) *inlineWait {
	w, _ := c.waits.Get().(*inlineWait)
	if w == nil {
		w = &inlineWait{c: c, giveUp: make(chan struct{})}
		w.mu.Lock() // fire reads t under it
		w.t = time.AfterFunc(time.Hour, w.fire)
		w.t.Stop()
	} else {
		w.mu.Lock()
	}
	w.n, w.cause, w.start, w.late, w.over = n, nil, time.Now(), false, false
	w.t.Reset(c.timeout)
	w.mu.Unlock()
	return w
}

// endWait stops w's timer (a firing in progress then does nothing), keeps
// w if its timer never fired, and says whether the call was waited for
// past the timeout and why the timer gave up on it, if it did.
func (c *calls) endWait(w *inlineWait) (late bool, cause error) {
	w.mu.Lock()
	w.over = true
	pending := w.t.Stop()
	late, cause = w.late, w.cause
	w.n = nil
	w.mu.Unlock()
	if pending {
		c.waits.Put(w)
	}
	return late, cause
}

// giveUpWith ends the call for cause; under w.mu.
func (w *inlineWait) giveUpWith(cause error) {
	w.cause = cause
	close(w.giveUp)
}

// fire is the timer's function: at the timeout, and after it while Redis
// is vouched for.
func (w *inlineWait) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over {
		return
	}
	if !w.n.healthy(w.c.fresh) {
		w.giveUpWith(errUnvouched)
		return
	}
	left := w.c.ceiling - time.Since(w.start)
	if left <= 0 {
		w.giveUpWith(errCeiling)
		return
	}
	w.late = true
	w.t.Reset(min(w.c.fresh/2, left)) // look again before the probe's word goes stale
}
