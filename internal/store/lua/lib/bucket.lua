-- lib/bucket.lua is how a bucket on a key of its own is kept (the scripts
-- that use it follow lib/take.lua, which has the clock).
--
-- A bucket is one number: the moment it will be full again (GCRA's
-- "theoretical arrival time", TAT), in microseconds. It is kept in the
-- key's expiry, not its value: the key expires at the first millisecond at
-- or after the TAT, and its value is how many microseconds before that the
-- TAT falls (0 to 999). Redis shares the objects of integers below 10,000,
-- so a bucket is a key with a TTL and nothing else, smaller than the usual
-- {tokens, last} hash. A missing key
-- is a full bucket, and the key expires exactly when the bucket is full
-- again, so an idle bucket costs nothing. (Shared integers need a
-- maxmemory-policy that is not LRU/LFU; a limits Redis runs noeviction.)
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
