-- take_bucket takes ARGV[3] tokens from a bucket of capacity ARGV[1] that
-- refills one token every ARGV[2] microseconds (lib/bucket.lua keeps the
-- bucket). It spends only when it allows. Returns {allowed, remaining,
-- retry_after_us, reset_after_us}.
-- The lib/ parts below are copies of lua/lib/ (TestLuaLibraries holds
-- them to it; go test ./internal/store -run TestLuaLibraries -update
-- rewrites them).
-- begin lib/base.lua
-- lib/base.lua is what every counter script starts with: the functions its
-- decisions call per take, as locals (a global, and math.floor's table,
-- is a hash lookup at every call; a local is not), and Redis's clock.
local call, pcall_call, floor, ceil, format, tonumber = redis.call, redis.pcall, math.floor, math.ceil, string.format, tonumber
-- now_us is Redis's clock (TIME) in µs. (Arithmetic converts TIME's two
-- strings, as "+ 0" converts the numbers a hot loop reads from ARGV: once
-- each, where tonumber converts twice, in lua_isnumber and again in
-- lua_tonumber.)
local function now_us()
  local t = call('TIME')
  return t[1] * 1000000 + t[2]
end
-- check_slice reports whether now (µs) falls in slice idx of slices of
-- slice ms (lib/limit.lua's time-slice hashes).
local function check_slice(now, slice, idx)
  return floor(now / (slice * 1000)) == idx
end
-- end lib/base.lua
-- begin lib/take.lua
-- lib/take.lua is what the take scripts share: what a bucket holds, and the
-- decision of a batch of takes, which take_many (one key per counter,
-- lib/bucket.lua) and take_limits (fields of time-slice hashes, lib/limit.lua)
-- run alike: they differ only in where a limit's state is read and
-- written, so one loop decides for both and neither can drift.
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
-- decide_takes decides n takes in order, in one atomic step. ARGV holds
-- each take's values stride apart from at: kind (1 fixed window, 2 token
-- bucket), flags (manyShadow, manyHold, manyCount), limit (a window's
-- events, a bucket's capacity), window ms or a token's refill interval µs,
-- cost (0 peeks), then what the caller's open reads. open(i, kind, param,
-- at) returns take i's state, one table per limit (takes of one limit see
-- what the earlier ones spent): a window {count, left: ms until it ends,
-- < 0 when none runs}, a bucket {tat: µs, at least now}.
--
-- It decides on those copies and returns the five replies per take
-- (allowed, spent, and for a window {count, left ms, 0}, for a bucket
-- {remaining, retry_after µs, reset_after µs}) and whether the caller
-- writes the states back: not when all (all or nothing) and a take that is
-- not shadow denies or any take is held, which is how a denied batch spends
-- nothing without a second round trip to refund. Otherwise an allowed take
-- that is not held has spent, and so has a counting window's hit
-- (manyCount, an Envoy rule's) that denies: it counts as
-- envoyproxy/ratelimit's INCRBY does. A window that starts counting gets
-- left = its window (the caller starts it now); a bucket that spends, its
-- new tat.
local function decide_takes(all, n, at, stride, now, open)
  local out, stop = {}, false
  for i = 1, n do
    local kind, flags = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
    local limit, param, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
    local shadow, held, counted = flags % 2 == 1, math.floor(flags / 2) % 2 == 1, flags >= 4
    local apply = all or not held
    local s = open(i, kind, param, at)
    local allowed, remaining, retry_after, reset_after -- a bucket's reply: µs
    if kind == 1 then
      if cost == 0 then
        allowed = s.count <= limit
      else
        allowed = s.count + cost <= limit
        if apply and (allowed or counted) then
          s.count = s.count + cost
          if s.left < 0 then s.left = param end
        end
      end
    else
      local burst = limit * param
      local new_tat = math.floor(s.tat + cost * param + 0.5)
      if new_tat - now > burst + 0.5 then
        allowed = false
        remaining = tokens_left(burst, s.tat - now, param)
        retry_after, reset_after = math.ceil(new_tat - now - burst), math.ceil(s.tat - now)
      else
        allowed = true
        if cost > 0 and apply then s.tat = new_tat end
        remaining = tokens_left(burst, new_tat - now, param)
        retry_after, reset_after = 0, math.ceil(new_tat - now)
      end
    end
    if all and (held or (not allowed and not shadow)) then stop = true end
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = ((allowed or counted) and apply and cost > 0) and 1 or 0
    if kind == 1 then
      out[#out + 1] = s.count
      out[#out + 1] = s.left
      out[#out + 1] = 0
    else
      out[#out + 1] = remaining
      out[#out + 1] = retry_after
      out[#out + 1] = reset_after
    end
    at = at + stride
  end
  if stop then
    for j = 2, #out, 5 do out[j] = 0 end
  end
  return out, not stop
end
-- end lib/take.lua
-- begin lib/bucket.lua
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
-- end lib/bucket.lua
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
