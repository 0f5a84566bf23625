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

// ProbePatience is how long the probe waits on one ping (Fallback.Probe):
// lateRoundsToFail probe rounds, the time after which a ping still
// unanswered has stopped the vouching anyway. The probe's client must let
// a ping's read take that long.
func ProbePatience(every, timeout time.Duration) time.Duration {
	return lateRoundsToFail * (every + timeout)
}

// errPingLate is the verdict on a ping still unanswered at the probe's
// timeout, or a round after: a timeout, though the ping goes on.
var errPingLate = fmt.Errorf("resilience: the probe's ping is not answered yet: %w", context.DeadlineExceeded)

// probe runs one ping on the node named name and gives its verdicts: a
// late one (errPingLate) at the probe's timeout and at every round after
// while the ping goes on, then the ping's own outcome, within
// ProbePatience. A ping that was late and then answered vouches for
// Redis: on a saturated host (this process, or the proxy and Redis
// beside it, not scheduled for a while) every ping may come back past the
// timeout, and a ping given up on at the timeout would take such a host
// for a black hole once three in a row did; a black hole never answers,
// and its late verdicts stop the vouching as soon as before.
func (c *calls) probe(ctx context.Context, name string, ping func(context.Context) error) {
	pctx, cancel := context.WithTimeout(ctx, ProbePatience(c.fresh-c.probeTO, c.probeTO))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ping(pctx) }()
	t := time.NewTimer(c.probeTO)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			if ctx.Err() == nil {
				c.observeProbe(ctx, name, err)
			}
			return
		case <-t.C:
			// Once ctx ends, the ping ends with it (pctx), unobserved.
			if ctx.Err() == nil {
				c.observeProbe(ctx, name, errPingLate)
				t.Reset(c.fresh)
			}
		}
	}
}

// observeProbe is Fallback.ObserveNodeProbe: the probe's result on the
// node named name.
func (c *calls) observeProbe(ctx context.Context, name string, err error) {
	n := c.nodes.get(name)
	n.probeSeen.Store(true)
	now := time.Now().UnixNano()
	prev := n.verdictAt.Swap(now)
	switch late := err != nil && timedOut(err); {
	case !late:
		n.lateRounds.Store(0)
	case n.callOK.Load() > prev:
		// The ping was late, but calls got their replies since the last
		// verdict: this host is saturated, Redis is not failing. Not a
		// failure anywhere.
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
		c.failed()
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
		if err == nil && c.warm != nil && name == "" {
			wctx, cancel := context.WithTimeout(ctx, c.probeTO)
			err = c.warm(wctx)
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
func (c *calls) wait(ctx context.Context, n *node, abandons bool, fn func(ctx context.Context) error) error {
	if c.timeout <= 0 {
		return fn(ctx)
	}
	if !n.probing() { // no probe: the timeout alone decides
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return fn(cctx)
	}
	if abandons {
		return c.waitInline(ctx, n, fn)
	}
	return c.waitBounded(ctx, n, fn)
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
// A call begun while Redis was vouched for is waited for up to the
// ceiling even if the probe stops vouching meanwhile, and one begun while
// it was not ends at the timeout even if the probe comes to vouch
// meanwhile: the call never leaves its caller's goroutine, at the price
// of the probe being looked at only once.
func (c *calls) waitBounded(ctx context.Context, n *node, fn func(ctx context.Context) error) error {
	start := time.Now()
	vouched := n.healthy(c.fresh)
	limit := c.timeout
	if vouched {
		limit = c.ceiling
	}
	cctx, cancel := context.WithDeadline(ctx, start.Add(limit))
	err := fn(cctx)
	over := cctx.Err() // read before cancel, which would set it
	cancel()
	late := vouched && time.Since(start) > c.timeout
	switch {
	case err == nil:
		return c.settle(ctx, n, nil, late)
	case ctx.Err() != nil:
		return ctx.Err() // the caller went, or its own deadline passed
	case over != nil && !vouched:
		return c.unvouched()
	case over != nil:
		// At the ceiling. go-redis may say so as a network timeout, which
		// is no context.DeadlineExceeded: settle must see one.
		err = errors.Join(err, context.DeadlineExceeded)
	}
	return c.settle(ctx, n, err, late)
}

// settle is the verdict on a call that returned err, late when it was
// still waited for past the timeout: a deadline met while Redis is
// healthy sheds the call.
func (c *calls) settle(ctx context.Context, n *node, err error, late bool) error {
	if late {
		c.late.Add(1)
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && n.healthy(c.fresh) {
		return c.overloaded(err)
	}
	return err
}

// overloaded counts a call shed at the ceiling, cause its error.
func (c *calls) overloaded(cause error) error {
	c.shed.Add(1)
	return fmt.Errorf("resilience: no answer within %s from a healthy redis: %w (%w)", c.ceiling, problem.ErrOverloaded, cause)
}

// unvouched is the error of a call past the timeout while the probe does
// not vouch for Redis.
func (c *calls) unvouched() error {
	return fmt.Errorf("resilience: no answer within %s, and the probe does not vouch for redis: %w", c.timeout, context.DeadlineExceeded)
}
