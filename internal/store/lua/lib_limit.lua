-- lib_limit is how the /limits/check limits are kept: many limits per
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
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- check_slice reports whether now (µs) falls in slice idx of slices of
-- slice ms.
local function check_slice(now, slice, idx)
  return math.floor(now / (slice * 1000)) == idx
end
-- find returns a limit's stored value and where it is (true: cur, false:
-- prev), or nil.
local function find(cur, prev, field)
  local v = redis.call('HGET', cur, field)
  if v then return v, true end
  v = redis.call('HGET', prev, field)
  if v then return v, false end
  return nil, nil
end
-- expire_new gives the hash cur of slice idx its end, the end of slice
-- idx + 1, unless it has one (it was just created by the caller's HSET).
local function expire_new(cur, slice, idx)
  redis.call('PEXPIREAT', cur, string.format('%.0f', (idx + 2) * slice), 'NX')
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
    if where == true then redis.call('HDEL', cur, field)
    elseif where == false then redis.call('HDEL', prev, field) end
    return
  end
  local base, last = idx * slice * 1000, (idx + 2) * slice * 1000
  if tat > last then tat = last end
  redis.call('HSET', cur, field, string.format('%.0f', tat - base))
  if where == false then redis.call('HDEL', prev, field) end
  if where ~= true then expire_new(cur, slice, idx) end
end
-- tokens_left is lib_bucket's: what a bucket holds when it is full again
-- in d µs, allowing for a TAT up to half a µs late.
local function tokens_left(burst, d, interval)
  return math.floor((burst + 0.5 - d) / interval + 1e-9)
end

-- A window is {count, start (ms, nil when none runs), where}. A window
-- that ended reads as none (count 0), remembering where its field is.
local function load_window(cur, prev, field, slice, idx, window, now_ms)
  local v, where = find(cur, prev, field)
  if not v then return {count = 0, where = nil} end
  local count, rel
  local n = tonumber(v)
  if n then
    count = math.floor(n / slice)
    rel = n - count * slice
  else
    local c, r = string.match(v, '^(%d+):(%d+)$')
    count, rel = tonumber(c), tonumber(r)
  end
  local start = (where and idx or idx - 1) * slice + rel
  if start + window <= now_ms then return {count = 0, where = where} end
  return {count = count, start = start, where = where}
end
local function pack_window(count, rel, slice)
  if count < 2^53 / slice - 1 then return string.format('%.0f', count * slice + rel) end
  return string.format('%.0f:%.0f', count, rel)
end
-- store_window writes w back: a running window in the slice it started
-- in, a new one (no start) in cur, starting now, its ended predecessor
-- deleted from prev.
local function store_window(cur, prev, field, slice, idx, w, now_ms)
  if w.start then
    local key = w.where and cur or prev
    local k = w.where and idx or idx - 1
    redis.call('HSET', key, field, pack_window(w.count, w.start - k * slice, slice))
    return
  end
  redis.call('HSET', cur, field, pack_window(w.count, now_ms - idx * slice, slice))
  if w.where == false then redis.call('HDEL', prev, field) end
  if w.where ~= true then expire_new(cur, slice, idx) end
  w.start, w.where = now_ms, true
end
