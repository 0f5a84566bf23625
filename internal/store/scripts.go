package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each one is one atomic decision on one key, so it runs
// unchanged on a single node and on Redis Cluster. Scripts are called by
// SHA (EVALSHA) and fall back to EVAL when the server lost its script cache.
//
// Times are integer microseconds from Redis TIME: one clock for every
// otpguard instance, so no instance's clock skew can mint tokens (and the
// same clock Redis expires keys by). Lua
// numbers are doubles, exact to 2^53; microseconds since 1970 stay well
// below that for the next two centuries.

// bucketLua is what the bucket scripts share: the clock, and how a bucket
// is kept.
//
// A bucket is one number: the moment it will be full again (GCRA's
// "theoretical arrival time", TAT), in microseconds. It is kept in the
// key's expiry, not its value: the key expires at the first millisecond at
// or after the TAT, and its value is how many microseconds before that the
// TAT falls (0 to 999). Redis shares the objects of integers below 10,000,
// so a bucket is a key with a TTL and nothing else: about 117 bytes against
// 181 for the usual {tokens, last} hash (docs/benchmarks.md). A missing key
// is a full bucket, and the key expires exactly when the bucket is full
// again, so an idle bucket costs nothing. (Shared integers need a
// maxmemory-policy that is not LRU/LFU; a limits Redis runs noeviction.)
const bucketLua = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function load_tat(key, now)
  local r = redis.call('GET', key)
  if not r then return now end
  local at = redis.call('PEXPIRETIME', key)
  if at < 0 then return now end
  return at * 1000 - tonumber(r)
end
local function store_tat(key, tat, now)
  if tat <= now then
    redis.call('DEL', key)
    return
  end
  local at = math.ceil(tat / 1000)
  redis.call('SET', key, string.format('%.0f', at * 1000 - tat), 'PXAT', string.format('%.0f', at))
end
-- tokens_left is what a bucket holds when it is full again in d
-- microseconds. A TAT is kept in whole microseconds, rounded from
-- tat + cost * interval: with an interval that is not a whole number of
-- microseconds (3/s: 333333.33) the stored TAT can be up to half a
-- microsecond late, and the admission test allows for it (burst + 0.5).
-- The figure reported allows for it too, or a full bucket less one token
-- would read as two short (or -1 for a bucket of one).
local function tokens_left(burst, d, interval)
  return math.floor((burst + 0.5 - d) / interval + 1e-9)
end
`

// tokenBucketScript takes ARGV[3] tokens from a bucket of capacity ARGV[1]
// that refills one token every ARGV[2] microseconds. It spends only when
// it allows. Returns {allowed, remaining, retry_after_us, reset_after_us}.
var tokenBucketScript = newHotScript(tokenBucketSrc)

const tokenBucketSrc = bucketLua + `
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = now_us()
local tat = load_tat(KEYS[1], now)
if tat < now then tat = now end
local burst = capacity * interval
local new_tat = math.floor(tat + cost * interval + 0.5)
if new_tat - now > burst + 0.5 then
  local remaining = tokens_left(burst, tat - now, interval)
  return {0, remaining, math.ceil(new_tat - now - burst), math.ceil(tat - now)}
end
if cost > 0 then
  store_tat(KEYS[1], new_tat, now)
end
local remaining = tokens_left(burst, new_tat - now, interval)
return {1, remaining, 0, math.ceil(new_tat - now)}
`

// tokenRefundScript gives ARGV[2] tokens back to a bucket refilling one token
// every ARGV[1] microseconds. A missing key is already full: nothing to do.
var tokenRefundScript = redis.NewScript(bucketLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = now_us()
local tat = load_tat(KEYS[1], now)
store_tat(KEYS[1], math.floor(tat - tonumber(ARGV[2]) * tonumber(ARGV[1]) + 0.5), now)
return 1
`)

// windowTakeScript is a fixed-window hit that counts only when it allows:
// ARGV[1] more against a limit of ARGV[2], in a window of ARGV[3] ms that
// starts at the first counted hit (PEXPIRE NX, as hitWindow). A denied hit
// writes nothing. Returns {allowed, count, pttl}; pttl is -2 for a window
// not started.
var windowTakeScript = newHotScript(`
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local cost = tonumber(ARGV[1])
if count + cost > tonumber(ARGV[2]) then
  return {0, count, redis.call('PTTL', KEYS[1])}
end
count = redis.call('INCRBY', KEYS[1], cost)
redis.call('PEXPIRE', KEYS[1], ARGV[3], 'NX')
return {1, count, redis.call('PTTL', KEYS[1])}
`)

// windowRefundScript takes ARGV[1] back off a fixed-window counter, never
// below zero and never creating a key: a DECRBY on a key that just expired
// would leave a counter without a TTL. DECRBY keeps the key's TTL.
var windowRefundScript = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]))
if not v or v <= 0 then return 0 end
return redis.call('DECRBY', KEYS[1], math.min(v, tonumber(ARGV[1])))
`)

var allScripts = []*redis.Script{velocityScript, velocityRefundScript, conversionScript, tokenBucketScript.Script, tokenRefundScript, windowTakeScript.Script, windowRefundScript, tokenSyncScript}

// tokenSyncScript adds ARGV[3] tokens that an instance already spent on its
// own (sync mode) to a bucket of capacity ARGV[1] refilling one token every
// ARGV[2] microseconds, and returns {remaining, reset_after_us}. Unlike
// tokenBucketScript it never refuses: the tokens are gone. A bucket
// overspent by the instances goes below zero (remaining < 0) and pays the
// debt back out of its refill, which is how sync mode corrects itself.
var tokenSyncScript = redis.NewScript(bucketLua + `
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local now = now_us()
local tat = load_tat(KEYS[1], now)
if tat < now then tat = now end
tat = math.floor(tat + tonumber(ARGV[3]) * interval + 0.5)
store_tat(KEYS[1], tat, now)
return {tokens_left(capacity * interval, tat - now, interval), math.ceil(tat - now)}
`)

// TokenBucketScript is the token bucket script's source, for tools that
// drive Redis with it directly (cmd/otpguard-load runs redis-benchmark on
// it, by the SHA otpguard itself uses).
func TokenBucketScript() (src, sha string) { return tokenBucketSrc, tokenBucketScript.Hash() }

// hotScript is a script of the /limits/check path, run once per decision
// or batch. Its callers build the EVALSHA's arguments in one slice (args)
// and run sends it as it is: go-redis's Script.Run takes the keys and the
// arguments apart, copies them into a slice of its own and boxes the SHA
// and each key again, two or three allocations a call more
// (BenchmarkTakeTokenBucket, BenchmarkTakeBatch10).
type hotScript struct {
	*redis.Script
	sha any // Hash(), boxed once
}

func newHotScript(src string) hotScript {
	s := redis.NewScript(src)
	return hotScript{Script: s, sha: s.Hash()}
}

// args starts the arguments of one EVALSHA of s over nkeys keys, with room
// for more (the keys, then ARGV) to be appended.
func (s hotScript) args(nkeys, more int) []any {
	args := make([]any, 3, 3+more)
	args[0], args[1], args[2] = "evalsha", s.sha, nkeys
	return args
}

// run sends args (from s.args, keys and ARGV appended) as one EVALSHA. If
// the server lost its script cache (restart, SCRIPT FLUSH) the script did
// not run, so running it again counts once: run EVALs it, which also puts
// it back in the cache, as Script.Run does.
func (s hotScript) run(ctx context.Context, rdb rediser, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // the keys follow numkeys, for Redis Cluster's routing
	_ = rdb.Process(ctx, cmd)
	if !isNoScript(cmd.Err()) {
		return cmd
	}
	keys := make([]string, args[2].(int))
	for i := range keys {
		keys[i] = args[3+i].(string)
	}
	return s.Eval(ctx, rdb, keys, args[3+len(keys):]...)
}
