package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/otpguard/otpguard/internal/problem"
)

// DefaultProbeEvery and DefaultProbeTimeout are how often the probe pings
// Redis and how long one ping may take.
const (
	DefaultProbeEvery   = 50 * time.Millisecond
	DefaultProbeTimeout = 100 * time.Millisecond
)

// probing reports whether a probe has ever reported on n.
func (n *node) probing() bool { return n.probeSeen.Load() }

// The probe's verdict is given each time the probe's ping ends
// (ObserveProbe), not aged by the wall clock: when this process is not
// scheduled for a while (a saturated host), every timer fires late at
// once, and a probe success 150 ms old says nothing against Redis; the
// next ping's outcome does. A verdict older than staleVerdicts probe
// rounds (a wedged probe) vouches for nothing (node.healthy).

// lateRoundsToFail is how many timed-out pings in a row, with no call
// answered meanwhile, stop the probe vouching for Redis: a black hole is
// told after about three probe rounds (~450 ms by default), while a stall
// of this process shorter than that is not taken for one.
const lateRoundsToFail = 3

// staleVerdicts bounds the age of the probe's verdict, in probe rounds
// (ProbeEvery + ProbeTimeout): 10, 1.5 s by default.
const staleVerdicts = 10

// timedOut reports whether err is a deadline or a network timeout, as
// opposed to an error from Redis or a refused connection.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout())
}

// ObserveProbe takes one result of the probe, a ping on a warm connection
// of its own (store.Probe). A success vouches for Redis: calls past the
// timeout are waited for instead of failing; so does a ping that timed out
// while calls got their replies since the last verdict (healthy). Results count in the breaker
// like calls, so a dead Redis opens it with no traffic; and while the
// breaker is half-open the probe alone tries Redis, through Warm, so no
// decision meets a cold pool.
func (f *Fallback) ObserveProbe(ctx context.Context, err error) {
	f.ObserveNodeProbe(ctx, "", err)
}

// ObserveNodeProbe is ObserveProbe for one node of a Redis Cluster (its
// master's address, as FallbackOptions.NodeOf names it). Warm is run
// only for the one node of a single Redis or Sentinel ("").
func (f *Fallback) ObserveNodeProbe(ctx context.Context, name string, err error) {
	n := f.node(name)
	n.probeSeen.Store(true)
	now := time.Now().UnixNano()
	prev := n.verdictAt.Swap(now)
	switch late := err != nil && timedOut(err); {
	case !late:
		n.lateRounds.Store(0)
	case n.callOK.Load() > prev:
		// The ping was late, but calls got their replies since the last
		// verdict: this host is saturated, Redis is not failing (measured:
		// with the ping alone deciding, up to 64 % of decisions fell to
		// the fallback at a load average of 30). Not a failure anywhere.
		n.lateRounds.Store(0)
		n.vouch.Store(true)
		return
	case n.vouch.Load() && n.lateRounds.Add(1) < lateRoundsToFail:
		// Late, and nothing answered: this process may simply not have
		// run (a stall of a few hundred ms on a saturated host); only
		// lateRoundsToFail such rounds in a row stop the vouching.
		return
	}
	n.vouch.Store(err == nil)
	if err != nil {
		f.failed()
	}
	switch n.breaker.State() {
	case gobreaker.StateClosed:
		if done, aerr := n.breaker.Allow(); aerr == nil {
			done(err)
		}
	case gobreaker.StateHalfOpen:
		// The probe is the half-open trial: a failed ping opens the
		// breaker again for OpenFor (so the status says open through an
		// outage), a good one warms the decision pool and closes it.
		done, aerr := n.breaker.Allow()
		if aerr != nil {
			return
		}
		if err == nil && f.warm != nil && name == "" {
			wctx, cancel := context.WithTimeout(ctx, f.probeTO)
			err = f.warm(wctx)
			cancel()
		}
		done(err)
	}
}

// wait runs fn and waits for it: up to the timeout, and past it for as
// long as the probe vouches for Redis (up to the ceiling), because a reply
// that is late only because this host is saturated is still exact, while a
// decision abandoned at the timeout may have counted and would be decided
// a second time by the fallback. A call outliving the ceiling on a healthy
// Redis is shed (ErrOverloaded); one outliving the timeout while Redis is
// not vouched for is a store failure (the fallback decides).
//
// Every call runs on the caller's goroutine. abandons says fn returns as
// soon as its waiter gives up on it (Abandoner): the probe is then looked
// at again while it runs (waitInline). Any other call is held to one
// deadline chosen as it starts (waitBounded).
func (f *Fallback) wait(ctx context.Context, n *node, abandons bool, fn func(ctx context.Context) error) error {
	if f.timeout <= 0 {
		return fn(ctx)
	}
	if !n.probing() { // no probe: the timeout alone decides, as before
		cctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return fn(cctx)
	}
	if abandons {
		return f.waitInline(ctx, n, fn)
	}
	return f.waitBounded(ctx, n, fn)
}

// waitBounded is wait for a call that cannot be abandoned (a send's
// MULTI/EXEC, a code's save: once written, go-redis reads a command's
// reply until its deadline, whatever a cancellation says). It runs on the
// caller's goroutine under one deadline, chosen as it starts by the
// probe's verdict on n:
//
//   - vouched for: the ceiling. A late reply is the decision; a call
//     still unanswered at the ceiling is shed if Redis is vouched for
//     then, and a store failure (the fallback decides) if not.
//   - not vouched for: the timeout. A call unanswered by then is a store
//     failure, and the fallback decides.
//
// The verdicts are the ones a worker's caller gave (a call the fallback
// decides is never also read from the store; one that timed out may have
// counted there, as ever), and no caller waits past the ceiling.
// What differs is when the probe is looked at: a worker's caller looked
// again at the timeout and every half probe round after, and stopped
// waiting as soon as the probe stopped vouching, leaving the call to run
// on. Here a call begun while Redis was vouched for is waited for up to
// the ceiling even if the probe stops vouching meanwhile (an outage's
// first calls then wait up to the ceiling, not ~3 probe rounds), and one
// begun while it was not ends at the timeout even if the probe comes to
// vouch meanwhile. What it saves: the hand-off to a worker and back (two
// goroutine switches, a channel and a timer per call): a send took 0.94 of
// the CPU it took on a worker (docs/benchmarks.md, section 2.000).
func (f *Fallback) waitBounded(ctx context.Context, n *node, fn func(ctx context.Context) error) error {
	start := time.Now()
	vouched := n.healthy(f.fresh)
	limit := f.timeout
	if vouched {
		limit = f.ceiling
	}
	cctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	err := fn(cctx)
	over := cctx.Err() // read before cancel, which would set it
	cancel()
	late := vouched && time.Since(start) > f.timeout
	switch {
	case err == nil:
		return f.settle(ctx, n, nil, late)
	case ctx.Err() != nil:
		return ctx.Err() // the caller went, or its own deadline passed
	case over != nil && !vouched:
		return f.unvouched()
	case over != nil:
		// At the ceiling. go-redis may say so as a network timeout, which
		// is no context.DeadlineExceeded: settle must see one.
		err = errors.Join(err, context.DeadlineExceeded)
	}
	return f.settle(ctx, n, err, late)
}

// settle is the verdict on a call that returned err, late when it was
// still waited for past the timeout: a deadline met while Redis is
// healthy sheds the call.
func (f *Fallback) settle(ctx context.Context, n *node, err error, late bool) error {
	if late {
		f.late.Add(1)
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && n.healthy(f.fresh) {
		return f.overloaded(err)
	}
	return err
}

// overloaded counts a call shed at the ceiling, cause its error.
func (f *Fallback) overloaded(cause error) error {
	f.shed.Add(1)
	return fmt.Errorf("resilience: no answer within %s from a healthy redis: %w (%w)", f.ceiling, problem.ErrOverloaded, cause)
}

// unvouched is the error of a call past the timeout while the probe does
// not vouch for Redis.
func (f *Fallback) unvouched() error {
	return fmt.Errorf("resilience: no answer within %s, and the probe does not vouch for redis: %w", f.timeout, context.DeadlineExceeded)
}

// Late is how many calls a healthy Redis answered past the timeout: each
// would have been a fallback decision (or a refusal) without the probe. A
// rising count says this host is saturated.
func (f *Fallback) Late() int64 { return f.late.Load() }

// Shed is how many calls were given up on while Redis was healthy.
func (f *Fallback) Shed() int64 { return f.shed.Load() }
