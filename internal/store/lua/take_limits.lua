-- take_limits decides several /limits/check takes, in order, in one atomic
-- step, on lib_limit's time-slice hashes: take_many's decisions (same
-- arguments per take, same five replies per take, same all-or-nothing),
-- on fields instead of keys. KEYS[2i-1] and KEYS[2i] are take i's cur and
-- prev hashes. ARGV[1] is 1 for all or nothing, then eight values per
-- take: kind (1 fixed window, 2 token bucket), flags (manyShadow,
-- manyHold, manyCount), limit, window ms or a token's refill interval µs,
-- cost (0 peeks), slice ms, slice index, field.
--
-- If Redis's clock puts any take in another slice than the caller named,
-- it writes nothing and returns {-1, -1, now µs}, for the caller to name the
-- keys again. It reads every limit first and decides on copies, then
-- writes only what changed: a window's hit rewrites its field (and gives
-- a new hash its end once), a bucket moves to cur. A window is written
-- only when it counts, never on a denial or a peek.
local all = ARGV[1] == '1'
local now = now_us()
local now_ms = math.floor(now / 1000)
local n = #KEYS / 2
for i = 1, n do
  local at = 2 + (i - 1) * 8
  if not check_slice(now, tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])) then
    return {-1, -1, now}
  end
end
local state, order, out = {}, {}, {}
local stop = false
for i = 1, n do
  local at = 2 + (i - 1) * 8
  local kind, flags = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local limit, param, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  local slice, idx, field = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6]), ARGV[at + 7]
  local cur, prev = KEYS[2 * i - 1], KEYS[2 * i]
  local shadow, held, counted = flags % 2 == 1, math.floor(flags / 2) % 2 == 1, flags >= 4
  local apply = all or not held
  local id = cur .. ' ' .. field
  local s = state[id]
  local allowed, a, b, c
  if kind == 1 then
    if not s then
      s = load_window(cur, prev, field, slice, idx, param, now_ms)
      s.kind, s.cur, s.prev, s.field, s.slice, s.idx, s.count0 = 1, cur, prev, field, slice, idx, s.count
      state[id] = s
      order[#order + 1] = s
    end
    if cost == 0 then
      allowed = s.count <= limit
    else
      allowed = s.count + cost <= limit
      if apply and (allowed or counted) then
        s.count = s.count + cost
        if not s.start then s.start0, s.start = true, now_ms end
      end
    end
    a, b, c = s.count, s.start and (s.start + param - now_ms) or -2, 0
  else
    if not s then
      local tat, where = load_bucket(cur, prev, field, slice, idx, now)
      s = {kind = 2, tat = tat, tat0 = tat, where = where, cur = cur, prev = prev, field = field, slice = slice, idx = idx}
      state[id] = s
      order[#order + 1] = s
    end
    local burst = limit * param
    local new_tat = math.floor(s.tat + cost * param + 0.5)
    if new_tat - now > burst + 0.5 then
      allowed = false
      a = tokens_left(burst, s.tat - now, param)
      b, c = math.ceil(new_tat - now - burst), math.ceil(s.tat - now)
    else
      allowed = true
      if cost > 0 and apply then s.tat = new_tat end
      a = tokens_left(burst, new_tat - now, param)
      b, c = 0, math.ceil(new_tat - now)
    end
  end
  if all and (held or (not allowed and not shadow)) then stop = true end
  out[#out + 1] = allowed and 1 or 0
  out[#out + 1] = ((allowed or counted) and apply and cost > 0) and 1 or 0
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
end
if stop then
  for i = 2, #out, 5 do out[i] = 0 end
  return out
end
for _, s in ipairs(order) do
  if s.kind == 1 then
    if s.count > s.count0 then
      if s.start0 then s.start = nil end
      store_window(s.cur, s.prev, s.field, s.slice, s.idx, s, now_ms)
    end
  elseif s.tat ~= s.tat0 then
    store_bucket(s.cur, s.prev, s.field, s.slice, s.idx, s.tat, now, s.where)
  end
end
return out
