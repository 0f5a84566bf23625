package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A coalesced command's caller may give up on it: when its context ends,
// the caller is answered ctx.Err() at once, whether the command still
// waits in the queue or is on the wire. This is what lets the Fallback
// (internal/resilience) wait for a /limits/check decision on the caller's
// own goroutine instead of handing the call to another one (see
// Abandons): the call returns as soon as the Fallback cancels it.
//
// What each side may then touch:
//
//   - Still queued: the caller marks it abandoned and the worker that
//     takes it drops it unsent (claim), so a decision given up on is not
//     also counted in Redis.
//   - On the wire: the pipeline goes on and writes the reply. It writes
//     it into a stand-in, not into the caller's command, which go-redis
//     and the caller read and write as soon as the hook returns (Process
//     sets its error); the caller copies the stand-in's reply into its
//     own command only when it waited for it (answer).
//
// Either way the coalesced is not reused: the queue or the pipeline may
// still hold it, so it is left to the collector instead of the pool.

// States of a coalesced command (coalesced.state).
const (
	queued    = iota // waits for a worker
	claimed          // taken by a worker: it will be sent
	abandoned        // its caller gave up first: never sent
)

// standIn is the command a pipeline carries in cmd's stead: of cmd's
// type and arguments (shared, never written), replying into itself. nil
// for a type it does not know (the command then goes out as it is, and
// its caller waits for the reply).
func standIn(ctx context.Context, cmd redis.Cmder) redis.Cmder {
	switch cmd.(type) {
	case *redis.Cmd: // EVALSHA and EVAL: the decisions' scripts
		return redis.NewCmd(ctx, cmd.Args()...)
	case *redis.IntCmd:
		return redis.NewIntCmd(ctx, cmd.Args()...)
	case *redis.StringCmd:
		return redis.NewStringCmd(ctx, cmd.Args()...)
	case *redis.StatusCmd:
		return redis.NewStatusCmd(ctx, cmd.Args()...)
	case *redis.BoolCmd:
		return redis.NewBoolCmd(ctx, cmd.Args()...)
	}
	return nil
}

// answer copies the reply of s, cmd's stand-in, into cmd.
func answer(cmd, s redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.Cmd:
		c.SetVal(s.(*redis.Cmd).Val())
	case *redis.IntCmd:
		c.SetVal(s.(*redis.IntCmd).Val())
	case *redis.StringCmd:
		c.SetVal(s.(*redis.StringCmd).Val())
	case *redis.StatusCmd:
		c.SetVal(s.(*redis.StatusCmd).Val())
	case *redis.BoolCmd:
		c.SetVal(s.(*redis.BoolCmd).Val())
	}
	cmd.SetErr(s.Err())
}

// await waits for the reply of p, queued for cmd, or for leave (the
// caller's ctx.Done) or giveUp (guard.GiveUp(ctx)), both nil when it may
// not leave: then p carries cmd itself. Leaving by giveUp answers
// context.Canceled, as a cancelled context would.
func (c *Coalescer) await(ctx context.Context, leave, giveUp <-chan struct{}, cmd redis.Cmder, p *coalesced) error {
	select {
	case <-p.done:
	case <-leave:
		if !stays(p) {
			return ctx.Err()
		}
	case <-giveUp:
		if !stays(p) {
			return context.Canceled
		}
	}
	if p.cmd != cmd {
		answer(cmd, p.cmd)
	}
	c.recycle(p)
	return cmd.Err()
}

// stays reports, for a caller leaving p, whether p's reply is in after all
// (it takes it); else p is left: dropped unsent if still queued, its reply
// dropped if on the wire.
func stays(p *coalesced) bool {
	select {
	case <-p.done:
		return true
	default:
		p.state.CompareAndSwap(queued, abandoned)
		return false
	}
}

// recycle puts p back in the pool, once no queue or pipeline holds it.
func (c *Coalescer) recycle(p *coalesced) {
	p.cmd = nil
	p.state.Store(queued)
	c.pending.Put(p)
}

// claim keeps, in place, the commands of batch whose callers have not
// given up on them, and marks them claimed: from now on their callers
// leave them to the pipeline.
func claim(batch []*coalesced) []*coalesced {
	kept := batch[:0]
	for _, p := range batch {
		if p.state.CompareAndSwap(queued, claimed) {
			kept = append(kept, p)
		}
	}
	clear(batch[len(kept):]) // hold nothing given up on
	return kept
}
