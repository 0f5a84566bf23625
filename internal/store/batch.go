package store

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The /limits/check path: one script call per decision, no MULTI/EXEC.
//
// A script already runs atomically, so a MULTI/EXEC around it buys nothing
// and costs Redis the MULTI, the EXEC and the queueing of every command
// (measured with INFO commandstats, docs/benchmarks.md). A check is one
// EVALSHA; the checks of one batch on one hash slot are one EVALSHA of
// takeManyScript. Each is an independent command, so a client that
// pipelines concurrent requests' commands (auto-pipelining) can put many
// of them in one write. Scripts go by SHA through rediser, with EVAL when
// the server lost its script cache (hotScript.run).

// scripted reports whether t is decided by a script alone: a token bucket,
// or a fixed window that spends only if it allows. A fixed window that
// counts every hit (OTP sends) stays a MULTI of INCRBY + PEXPIRE NX, as
// the design requires.
func scripted(t guard.Take) bool {
	return t.Algorithm == guard.TokenBucket || (t.Algorithm == guard.FixedWindow && t.SpendIfAllowed)
}

func allScripted(takes []guard.Take) bool {
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
func (r *Redis) takeScripted(ctx context.Context, takes []guard.Take) ([]guard.Result, error) {
	if len(takes) == 1 && !takes[0].Hold {
		t := takes[0]
		var res guard.Result
		var err error
		switch {
		case t.Algorithm == guard.TokenBucket:
			s := tokenBucketScript
			args := append(s.args(1, 4), r.key(t.Key), t.Limit, interval(t.Rate), t.Cost)
			res, err = r.bucketResult(ctx, t, s.run(ctx, r.rdb, args))
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
		return []guard.Result{res}, nil
	}
	return r.takeMany(ctx, takes)
}

// Flags of one take in takeManyScript's arguments.
const (
	manyShadow = 1 // its denial does not stop the others
	manyHold   = 2 // decide, never spend
)

// takeMany runs takeManyScript over takes: all or nothing when every take
// asks for it (guard.Take.AllOrNothing), each on its own otherwise.
func (r *Redis) takeMany(ctx context.Context, takes []guard.Take) ([]guard.Result, error) {
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
		flags := 0
		if t.Shadow {
			flags |= manyShadow
		}
		if t.Hold {
			flags |= manyHold
		}
		if t.Algorithm == guard.TokenBucket {
			args = append(args, 2, flags, t.Limit, interval(t.Rate), t.Cost)
		} else {
			args = append(args, 1, flags, t.Limit, t.Window.Milliseconds(), t.Cost)
		}
	}
	v, err := takeManyScript.run(ctx, r.rdb, args).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("store: take %d: %w", len(takes), err)
	}
	if len(v) != 5*len(takes) {
		return nil, fmt.Errorf("store: take: script returned %d values for %d takes, want %d", len(v), len(takes), 5*len(takes))
	}
	res := make([]guard.Result, len(takes))
	for i, t := range takes {
		allowed, spent, a, b, c := v[5*i] == 1, v[5*i+1] == 1, v[5*i+2], v[5*i+3], v[5*i+4]
		if t.Algorithm == guard.TokenBucket {
			res[i] = guard.Result{Allowed: allowed, Limit: t.Limit, Remaining: a,
				RetryAfter: time.Duration(b) * time.Microsecond, ResetAfter: time.Duration(c) * time.Microsecond}
		} else {
			res[i] = fixedWindowResult(t, a, time.Duration(b)*time.Millisecond)
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

// takeManyScript decides several takes, in order, in one atomic step.
// KEYS[i] is take i's key (a key may repeat: a later take sees what the
// earlier ones spent). ARGV[1] is 1 for all or nothing, then five values
// per take: kind (1 fixed window, 2 token bucket), flags (manyShadow,
// manyHold), limit (a window's events, a bucket's capacity), window ms or
// a token's refill interval in µs, and cost (0 peeks).
//
// It reads every key first and decides on copies, then writes: all or
// nothing, nothing is written when a take that is not shadow denies or
// any take is held, which is how a denied batch spends nothing without a
// second round trip to refund. Each on its own, an allowed take that is
// not held is written. Returns five values per take: allowed, spent, and
// for a window {count, pttl ms, 0}, for a bucket {remaining, retry_after
// µs, reset_after µs}: what tokenBucketScript and windowTakeScript return.
//
// The arithmetic is theirs: a fixed window spends only if it allows and
// starts at its first counted hit (INCRBY, then PEXPIRE NX, as
// windowTakeScript); a bucket is bucketLua's TAT and tokenBucketScript's
// decision (TestTakeManyMatchesSingleScripts holds them together).
var takeManyScript = newHotScript(bucketLua + `
local all = ARGV[1] == '1'
local now = now_us()
local state, out = {}, {}
local stop = false
for i, key in ipairs(KEYS) do
  local at = 2 + (i - 1) * 5
  local kind, flags = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local limit, param, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  local shadow, held = flags % 2 == 1, flags >= 2
  local apply = all or not held
  local s = state[key]
  local allowed, a, b, c
  if kind == 1 then
    if not s then
      s = {kind = 1, window = param, count = tonumber(redis.call('GET', key) or '0'), pttl = redis.call('PTTL', key)}
      s.count0 = s.count
      state[key] = s
    end
    if cost == 0 then
      allowed = s.count <= limit
    else
      allowed = s.count + cost <= limit
      if allowed and apply then
        s.count = s.count + cost
        if s.pttl < 0 then s.pttl = param end
      end
    end
    a, b, c = s.count, s.pttl, 0
  else
    if not s then
      local tat = load_tat(key, now)
      if tat < now then tat = now end
      s = {kind = 2, tat = tat, tat0 = tat}
      state[key] = s
    end
    local burst = limit * param
    local new_tat = math.floor(s.tat + cost * param + 0.5)
    if new_tat - now > burst + 0.5 then
      allowed = false
      a = math.floor((burst - (s.tat - now)) / param + 1e-9)
      b, c = math.ceil(new_tat - now - burst), math.ceil(s.tat - now)
    else
      allowed = true
      if cost > 0 and apply then s.tat = new_tat end
      a = math.floor((burst - (new_tat - now)) / param + 1e-9)
      b, c = 0, math.ceil(new_tat - now)
    end
  end
  if all and (held or (not allowed and not shadow)) then stop = true end
  out[#out + 1] = allowed and 1 or 0
  out[#out + 1] = (allowed and apply and cost > 0) and 1 or 0
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
end
if stop then
  for i = 2, #out, 5 do out[i] = 0 end
  return out
end
for key, s in pairs(state) do
  if s.kind == 1 then
    if s.count > s.count0 then
      redis.call('INCRBY', key, s.count - s.count0)
      redis.call('PEXPIRE', key, s.window, 'NX')
    end
  elseif s.tat ~= s.tat0 then
    store_tat(key, s.tat, now)
  end
end
return out
`)
