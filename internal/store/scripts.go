package store

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each one is one atomic decision on one key, so it runs
// unchanged on a single node and on Redis Cluster. Scripts are called by
// SHA (EVALSHA) and fall back to EVAL when the server lost its script cache.
//
// Times are integer microseconds from Redis TIME: one clock for every
// otpguard instance, so no instance's clock skew can mint tokens. Lua
// numbers are doubles, exact to 2^53; microseconds since 1970 stay well
// below that for the next two centuries.

// tokenBucketScript takes ARGV[3] tokens from a bucket of capacity ARGV[1]
// that refills one token every ARGV[2] microseconds.
//
// The bucket is stored as one integer: the moment it will be full again
// (GCRA's "theoretical arrival time", TAT). Redis keeps an integer string in
// the key's object header with no separate allocation, which is what makes
// a bucket cost well under half of a {tokens, last} hash. A missing key is a
// full bucket, and the key expires exactly when the bucket is full again, so
// an idle bucket costs nothing.
//
// Returns {allowed, remaining, retry_after_us, reset_after_us}.
var tokenBucketScript = redis.NewScript(`
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local burst = capacity * interval
local new_tat = math.floor(tat + cost * interval + 0.5)
if new_tat - now > burst + 0.5 then
  local remaining = math.floor((burst - (tat - now)) / interval + 1e-9)
  return {0, remaining, math.ceil(new_tat - now - burst), math.ceil(tat - now)}
end
if cost > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
end
local remaining = math.floor((burst - (new_tat - now)) / interval + 1e-9)
return {1, remaining, 0, math.ceil(new_tat - now)}
`)

// tokenRefundScript gives ARGV[2] tokens back to a bucket refilling one token
// every ARGV[1] microseconds. A missing key is already full: nothing to do.
var tokenRefundScript = redis.NewScript(`
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
tat = math.floor(tat - tonumber(ARGV[2]) * tonumber(ARGV[1]) + 0.5)
if tat <= now then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
return 1
`)

// windowRefundScript takes ARGV[1] back off a fixed-window counter, never
// below zero and never creating a key: a DECRBY on a key that just expired
// would leave a counter without a TTL. DECRBY keeps the key's TTL.
var windowRefundScript = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]))
if not v or v <= 0 then return 0 end
return redis.call('DECRBY', KEYS[1], math.min(v, tonumber(ARGV[1])))
`)

// guessScript counts one guess against a live code and returns
// {attempts, mac, pttl}; nil when there is no code. Counting before the
// caller compares is what bounds the guesses: a guess that is never
// counted cannot exist.
var guessScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local a = redis.call('HINCRBY', KEYS[1], 'a', 1)
return {a, redis.call('HGET', KEYS[1], 'm'), redis.call('PTTL', KEYS[1])}
`)

// consumeScript deletes the code only if it is still the one the caller
// matched: of two concurrent correct guesses, one deletes it and wins.
var consumeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'm') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

var allScripts = []*redis.Script{tokenBucketScript, tokenRefundScript, windowRefundScript, guessScript, consumeScript}
