-- lib_bucket is what the bucket scripts share: the clock, and how a bucket
-- is kept.
--
-- A bucket is one number: the moment it will be full again (GCRA's
-- "theoretical arrival time", TAT), in microseconds. It is kept in the
-- key's expiry, not its value: the key expires at the first millisecond at
-- or after the TAT, and its value is how many microseconds before that the
-- TAT falls (0 to 999). Redis shares the objects of integers below 10,000,
-- so a bucket is a key with a TTL and nothing else: about 117 bytes against
-- 181 for the usual {tokens, last} hash (docs/benchmarks.md). A missing key
-- is a full bucket, and the key expires exactly when the bucket is full
-- again, so an idle bucket costs nothing. (Shared integers need a
-- maxmemory-policy that is not LRU/LFU; a limits Redis runs noeviction.)
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
