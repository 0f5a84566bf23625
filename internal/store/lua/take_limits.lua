-- take_limits decides several /limits/check takes, in order, in one atomic
-- step, on lib/limit.lua's time-slice hashes: take_many's decisions (lib/take.lua's
-- decide_takes: same arguments per take, same five replies per take, same
-- all or nothing), on fields instead of keys. KEYS[2i-1] and KEYS[2i] are
-- take i's cur and prev hashes. ARGV[1] is 1 for all or nothing, then
-- eight values per take: kind (1 fixed window, 2 token bucket), flags
-- (manyShadow, manyHold, manyCount), limit, window ms or a token's refill
-- interval µs, cost (0 peeks), slice ms, slice index, field. Returns
-- {-1, -1, now µs}, writing nothing, if Redis's clock puts a take in
-- another slice than the caller named (lib/limit.lua's take_group).
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
-- begin lib/limit.lua
-- lib/limit.lua is how the /limits/check limits are kept: many limits per
-- Redis key, in time-slice hashes (docs/scaling.md, "Where the keys live").
--
-- A limit's state lives at most one slice length L (ms): a fixed window
-- its window, a token bucket the time to refill from empty to full (after
-- which its state is the same as no state at all). Its state is one field
-- of a hash named by policy, slice index floor(now / L) and shard (a hash
-- of the limit's id): the caller passes KEYS cur (slice idx) and prev
-- (slice idx - 1) of that shard, both in one Cluster slot (the shard is
-- the hash tag), and the field, the id. A hash expires at the end of the
-- slice after its own (PEXPIREAT, set when the script creates it), so a
-- limit nobody touches again is gone at most 2L after its last touch, and
-- a lookup reads cur, then prev.
--
-- Slices are counted on Redis's clock (TIME), one clock for every
-- instance: the caller names the keys by its own estimate, and check_slice
-- refuses the call, writing nothing, when Redis's clock puts it in another
-- slice (the caller then names them again from the time returned).
--
-- Values are integers relative to the start of the slice they are in, so
-- that the listpack keeps them in a few bytes: a bucket's TAT in µs, a
-- window's count * L + its start in ms (or "count:start" for a count too
-- large for that to be exact in a double).
-- slices_hold reports whether now (µs) falls in the slice each of n items
-- named: ARGV[at + stride * i] is item i's slice ms (i from 0), the value
-- after it its slice index.
local function slices_hold(now, n, at, stride)
  for i = 0, n - 1 do
    if not check_slice(now, tonumber(ARGV[at + stride * i]), tonumber(ARGV[at + stride * i + 1])) then
      return false
    end
  end
  return true
end
-- find returns a limit's stored value and where it is (true: cur, false:
-- prev), or nil.
local function find(cur, prev, field)
  local v = call('HGET', cur, field)
  if v then return v, true end
  v = call('HGET', prev, field)
  if v then return v, false end
  return nil, nil
end
-- expire_new gives the hash cur of slice idx its end, the end of slice
-- idx + 1, unless it has one (it was just created by the caller's HSET).
local function expire_new(cur, slice, idx)
  call('PEXPIREAT', cur, format('%.0f', (idx + 2) * slice), 'NX')
end

-- A bucket is {tat, where}: tat in µs, where as find's.
local function load_bucket(cur, prev, field, slice, idx, now)
  local v, where = find(cur, prev, field)
  if not v then return now, nil end
  local k = where and idx or idx - 1
  local tat = k * slice * 1000 + tonumber(v)
  if tat < now then tat = now end
  return tat, where
end
-- store_bucket keeps tat in cur, moving it from prev, or deletes it when
-- the bucket is full (tat <= now). A TAT past the end of cur's hash (only
-- sync mode's debt) is cut to that end: the debt beyond is forgiven.
local function store_bucket(cur, prev, field, slice, idx, tat, now, where)
  if tat <= now then
    if where == true then call('HDEL', cur, field)
    elseif where == false then call('HDEL', prev, field) end
    return
  end
  local base, last = idx * slice * 1000, (idx + 2) * slice * 1000
  if tat > last then tat = last end
  call('HSET', cur, field, format('%.0f', tat - base))
  if where == false then call('HDEL', prev, field) end
  if where ~= true then expire_new(cur, slice, idx) end
end

-- A window is {count, start (ms, nil when none runs), where, num (kept
-- as one number of digits, which HINCRBY can add to)}. A window that ended reads as
-- none (count 0), remembering where its field is.
local function window_at(v, where, slice, idx, window, now_ms)
  local count, rel
  local n = tonumber(v)
  if n then
    count = floor(n / slice)
    rel = n - count * slice
  else
    local packed_count, packed_rel = string.match(v, '^(%d+):(%d+)$')
    count, rel = tonumber(packed_count), tonumber(packed_rel)
  end
  local start = (where and idx or idx - 1) * slice + rel
  if start + window <= now_ms then return {count = 0, where = where} end
  return {count = count, start = start, where = where, num = n ~= nil and string.find(v, '^%d+$') ~= nil}
end
local function load_window(cur, prev, field, slice, idx, window, now_ms)
  local v, where = find(cur, prev, field)
  if not v then return {count = 0, where = nil} end
  return window_at(v, where, slice, idx, window, now_ms)
end
-- A packed value is never the number 0 (a window refunded to no events
-- that started on its slice's first ms is "0:0"): bump reads a HINCRBY
-- that returns exactly what it added as a field that was not there.
local function pack_window(count, rel, slice)
  if count < 2^53 / slice - 1 and count + rel > 0 then return format('%.0f', count * slice + rel) end
  return format('%.0f:%.0f', count, rel)
end
-- store_window writes w back: a running window in the slice it started
-- in, a new one (no start) in cur, starting now, its ended predecessor
-- deleted from prev.
local function store_window(cur, prev, field, slice, idx, w, now_ms)
  if w.start then
    local key = w.where and cur or prev
    local k = w.where and idx or idx - 1
    call('HSET', key, field, pack_window(w.count, w.start - k * slice, slice))
    return
  end
  call('HSET', cur, field, pack_window(w.count, now_ms - idx * slice, slice))
  if w.where == false then call('HDEL', prev, field) end
  if w.where ~= true then expire_new(cur, slice, idx) end
  w.start, w.where = now_ms, true
end

-- take_window is a window's take that spends (take_at's), on w as
-- load_window read it.
local function take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta, w)
  local allowed = w.count + cost <= limit
  if not allowed and flags < 4 then
    return 0, 0, w.count, w.start and (w.start + param - now_ms) or -2, 0
  end
  w.count = w.count + cost
  if delta and w.num and w.count < 2^53 / slice - 1 then
    call('HINCRBY', w.where and cur or prev, field, delta)
  else
    store_window(cur, prev, field, slice, idx, w, now_ms)
  end
  return allowed and 1 or 0, 1, w.count, w.start + param - now_ms, 0
end
-- settle is a run's window take (take_window's decision and writes) after
-- its HINCRBY: the run adds delta (cost * L, as a string) to the field in
-- cur first, and reads a window that runs in cur, allowed or counted (its
-- common case), from what that returned (n) without calling here: no
-- HGET, no number parsed from a string, no table. settle decides every
-- other case, putting right what the HINCRBY did first, so that the
-- decision and what is stored are take_window's:
--  * no field in cur (n is what was added: pack_window never stores 0):
--    the window is prev's (the new field is deleted), or none (the field
--    is overwritten by the new window, or deleted on a denial);
--  * a window that ended: overwritten by the new one (a denied take
--    undoes the add by -delta);
--  * a denial: undone by -delta;
--  * a count too large for a double (n may have been rounded past 2^53):
--    undone by -delta, and the window read again exactly;
--  * a value HINCRBY refused (n an error: "count:start", or a number in
--    a form only Lua reads, "12e5"): nothing written; it is rewritten.
-- An old release's "0" (a window refunded to nothing on its slice's
-- first ms) reads as no field here: the same decision, the window's start
-- moved to now; such a field lives at most two slices after an upgrade.
-- It returns take_window's five values.
local function settle(n, cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta)
  if type(n) ~= 'number' then -- HINCRBY refused the value: it is rewritten, not added to
    return take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, nil,
      load_window(cur, prev, field, slice, idx, param, now_ms))
  end
  local added = cost * slice
  if n == added then
    local v = pcall_call('HGET', prev, field)
    if type(v) == 'table' then -- prev is not a hash: leave cur as it was
      call('HDEL', cur, field)
      error(v)
    end
    local w = {count = 0}
    if v then
      call('HDEL', cur, field)
      w = window_at(v, false, slice, idx, param, now_ms)
    end
    local allowed, spent, count, left = take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta, w)
    if spent == 0 and not v then call('HDEL', cur, field) end
    return allowed, spent, count, left, 0
  end
  local count, undo = floor(n / slice), format('%.0f', -added)
  if count >= 2^53 / slice - 1 then -- n past 2^53 may be rounded: read the window exactly
    call('HINCRBY', cur, field, undo)
    return take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta,
      load_window(cur, prev, field, slice, idx, param, now_ms))
  end
  local start = idx * slice + n - count * slice
  if start + param <= now_ms then
    if cost > limit and flags < 4 then call('HINCRBY', cur, field, undo) end
    return take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta, {count = 0, where = true})
  end
  if count <= limit or flags >= 4 then
    return count <= limit and 1 or 0, 1, count, start + param - now_ms, 0
  end
  call('HINCRBY', cur, field, undo)
  return take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta,
    {count = count - cost, start = start, where = true, num = true})
end

-- take_at is one take that spends (cost > 0, not held) on the limit of
-- field in hashes cur and prev of slice idx, its slice already checked:
-- take_one's decision, its five replies returned as five values (no table
-- per take: a run of take_limits_many lays them out flat), on values
-- already read (kind, flags, limit, param and cost as take_group's), now
-- in µs and ms.
local function take_at(cur, prev, field, kind, flags, limit, param, cost, slice, idx, now, now_ms)
  if kind == 1 then
    return take_window(cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, nil,
      load_window(cur, prev, field, slice, idx, param, now_ms))
  end
  local tat, where = load_bucket(cur, prev, field, slice, idx, now)
  local burst = limit * param
  local new_tat = floor(tat + cost * param + 0.5)
  if new_tat - now > burst + 0.5 then
    return 0, 0, tokens_left(burst, tat - now, param), ceil(new_tat - now - burst), ceil(tat - now)
  end
  store_bucket(cur, prev, field, slice, idx, new_tat, now, where)
  return 1, 1, tokens_left(burst, new_tat - now, param), 0, ceil(new_tat - now)
end

-- take_one is take_limit (one take that spends, not held): KEYS[k] and
-- KEYS[k + 1] are its cur and prev hashes, ARGV[at] to ARGV[at + 7] its
-- eight values as take_group's, and now is Redis's clock in µs. The same
-- decision and five replies as take_group, without a batch's bookkeeping
-- (a table per limit, the second pass), which is most of what a one-limit
-- call costs Redis beyond its HGET and HSET.
local function take_one(k, at, now)
  local slice, idx = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  if not check_slice(now, slice, idx) then return {-1, -1, now} end
  return {take_at(KEYS[k], KEYS[k + 1], ARGV[at + 7], tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
    tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), slice, idx, now, floor(now / 1000))}
end

-- take_group is take_limits: n takes, decided as lib/take.lua's decide_takes
-- (all or nothing if all), on the fields of time-slice hashes. KEYS[k +
-- 2i - 2] and KEYS[k + 2i - 1] are take i's cur and prev hashes, ARGV from
-- at eight values per take: decide_takes' five, then slice ms, slice index
-- and field.
--
-- If Redis's clock puts any take in another slice than the caller named,
-- it writes nothing and returns {-1, -1, now µs}, for the caller to name
-- the keys again. After deciding it writes only what changed: a window's
-- hit rewrites its field (and gives a new hash its end once), a bucket
-- moves to cur. A window is written only when it counts, never on a
-- denial or a peek.
local function take_group(all, k, n, at, now)
  if not slices_hold(now, n, at + 5, 8) then return {-1, -1, now} end
  local now_ms = floor(now / 1000)
  local state, order = {}, {}
  local function open(i, kind, param, a)
    local cur, prev = KEYS[k + 2 * i - 2], KEYS[k + 2 * i - 1]
    local slice, idx, field = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), ARGV[a + 7]
    local id = cur .. ' ' .. field
    local s = state[id]
    if s then return s end
    if kind == 1 then
      s = load_window(cur, prev, field, slice, idx, param, now_ms)
      s.count0, s.left = s.count, s.start and (s.start + param - now_ms) or -2
    else
      local tat, where = load_bucket(cur, prev, field, slice, idx, now)
      s = {tat = tat, tat0 = tat, where = where}
    end
    s.kind, s.cur, s.prev, s.field, s.slice, s.idx = kind, cur, prev, field, slice, idx
    state[id] = s
    order[#order + 1] = s
    return s
  end
  local out, write = decide_takes(all, n, at, 8, now, open)
  if not write then return out end
  for _, s in ipairs(order) do
    if s.kind == 1 then
      if s.count > s.count0 then store_window(s.cur, s.prev, s.field, s.slice, s.idx, s, now_ms) end
    elseif s.tat ~= s.tat0 then
      store_bucket(s.cur, s.prev, s.field, s.slice, s.idx, s.tat, now, s.where)
    end
  end
  return out
end
-- end lib/limit.lua
return take_group(ARGV[1] == '1', 1, #KEYS / 2, 2, now_us())
