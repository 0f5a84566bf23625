package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// The /limits/check path: one script call per decision, no MULTI/EXEC.
//
// A script already runs atomically, so a MULTI/EXEC around it buys nothing
// and costs Redis the MULTI, the EXEC and the queueing of every command.
// A check is one
// EVALSHA; the checks of one batch on one hash slot are one EVALSHA of
// takeManyScript. Each is an independent command, so a client that
// pipelines concurrent requests' commands (auto-pipelining) can put many
// of them in one write. Scripts go by SHA through rediser, with EVAL when
// the server lost its script cache (hotScript.run).

// scripted reports whether t is decided by a script alone: a token bucket,
// or a fixed window that spends only if it allows. A fixed window that
// counts every hit (OTP sends) stays a MULTI of INCRBY + PEXPIRE NX, as
// the design requires; one of an Independent policy (the Envoy rules) is
// takeManyScript's counting window, as atomic and one command.
func scripted(t limit.Take) bool {
	return t.Algorithm == limit.TokenBucket || (t.Algorithm == limit.FixedWindow && (t.SpendIfAllowed || t.Independent))
}

func allScripted(takes []limit.Take) bool {
	for _, t := range takes {
		if !scripted(t) {
			return false
		}
	}
	return true
}

// takeScripted decides takes that are all scripted (and, on Redis
// Cluster, all of one slot) in one script call. A single take that
// spends goes to its own script (tokenBucketScript, windowTakeScript);
// anything else (several takes, a peek of a window, a held take) to
// takeManyScript.
func (r *Counters) takeScripted(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if len(takes) == 1 && !takes[0].Hold {
		t := takes[0]
		var res limit.Result
		var err error
		switch {
		case t.Algorithm == limit.TokenBucket:
			s := tokenBucketScript
			args := append(s.args(1, 4), r.key(t.Key), t.Limit, interval(t.Rate), t.Cost)
			res, err = r.bucketResult(ctx, t, s.run(ctx, r.rdb, args))
		case t.Cost > 0 && t.Independent:
			s := windowCountScript
			args := append(s.args(1, 2), r.key(t.Key), t.Cost, t.Window.Milliseconds())
			res, err = windowCountResult(t, s.run(ctx, r.rdb, args))
		case t.Cost > 0:
			s := windowTakeScript
			args := append(s.args(1, 4), r.key(t.Key), t.Cost, t.Limit, t.Window.Milliseconds())
			res, err = r.windowTakeResult(ctx, t, s.run(ctx, r.rdb, args))
		default:
			return r.takeMany(ctx, takes)
		}
		if err != nil {
			return nil, fmt.Errorf("store: take %s: %w", r.logKey(t.Key), err)
		}
		return []limit.Result{res}, nil
	}
	return r.takeMany(ctx, takes)
}

// windowCountResult reads windowCountScript's reply: counted, allowed or not.
func windowCountResult(t limit.Take, cmd *redis.Cmd) (limit.Result, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return limit.Result{}, err
	}
	if len(v) != 2 {
		return limit.Result{}, fmt.Errorf("window count script returned %d values, want 2", len(v))
	}
	return fixedWindowResult(t, v[0], time.Duration(v[1])*time.Millisecond), nil
}

// Flags of one take in takeManyScript's arguments.
const (
	manyShadow = 1 // its denial does not stop the others
	manyHold   = 2 // decide, never spend
	manyCount  = 4 // a window that counts every hit, the one that denies included (Take.Independent)
)

// takeMany runs takeManyScript over takes: all or nothing when every take
// asks for it (limit.Take.AllOrNothing), each on its own otherwise.
func (r *Counters) takeMany(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	// EVALSHA's arguments: the keys, then ARGV: all or nothing, and five
	// per take.
	args := takeManyScript.args(len(takes), 6*len(takes)+1)
	for _, t := range takes {
		args = append(args, r.key(t.Key))
	}
	all := len(args)
	args = append(args, 1)
	for _, t := range takes {
		if !t.AllOrNothing {
			args[all] = 0
		}
		if t.Algorithm == limit.TokenBucket {
			args = append(args, 2, manyFlags(t), t.Limit, interval(t.Rate), t.Cost)
		} else {
			args = append(args, 1, manyFlags(t), t.Limit, t.Window.Milliseconds(), t.Cost)
		}
	}
	v, err := takeManyScript.run(ctx, r.rdb, args).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("store: take %d: %w", len(takes), err)
	}
	return manyResults(takes, v)
}

// manyFlags is t's flags in takeManyScript's (and takeLimitsScript's)
// arguments.
func manyFlags(t limit.Take) int {
	flags := 0
	if t.Shadow {
		flags |= manyShadow
	}
	if t.Hold {
		flags |= manyHold
	}
	if t.Independent {
		flags |= manyCount
	}
	return flags
}

// manyResults reads takeManyScript's (and takeLimitsScript's) reply, five
// values per take.
func manyResults(takes []limit.Take, v []int64) ([]limit.Result, error) {
	if len(v) != 5*len(takes) {
		return nil, fmt.Errorf("store: take: script returned %d values for %d takes, want %d", len(v), len(takes), 5*len(takes))
	}
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		// After allowed and spent, a bucket's {remaining, retry_after µs,
		// reset_after µs} or a window's {count, left ms, 0}.
		allowed, spent, vals := v[5*i] == 1, v[5*i+1] == 1, v[5*i+2:5*i+5]
		if t.Algorithm == limit.TokenBucket {
			res[i] = limit.Result{Allowed: allowed, Limit: t.Limit, Remaining: vals[0],
				RetryAfter: time.Duration(vals[1]) * time.Microsecond, ResetAfter: time.Duration(vals[2]) * time.Microsecond}
		} else {
			res[i] = fixedWindowResult(t, vals[0], time.Duration(vals[1])*time.Millisecond)
			res[i].Allowed = allowed
			res[i].RetryAfter = 0
			if !allowed {
				res[i].RetryAfter = res[i].ResetAfter
			}
		}
		res[i].Spent = spent
	}
	return res, nil
}

// takeManyScript decides several takes, in order, in one atomic step
// (lua/take_many.lua).
var takeManyScript = newHotScript(script("take_many"))
