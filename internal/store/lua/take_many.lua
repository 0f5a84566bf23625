-- take_many decides several takes, in order, in one atomic step.
-- KEYS[i] is take i's key (a key may repeat: a later take sees what the
-- earlier ones spent). ARGV[1] is 1 for all or nothing, then five values
-- per take: kind (1 fixed window, 2 token bucket), flags (manyShadow,
-- manyHold, manyCount), limit (a window's events, a bucket's capacity), window ms or
-- a token's refill interval in µs, and cost (0 peeks).
--
-- It reads every key first and decides on copies, then writes: all or
-- nothing, nothing is written when a take that is not shadow denies or
-- any take is held, which is how a denied batch spends nothing without a
-- second round trip to refund. Each on its own, an allowed take that is
-- not held is written, and so is a counting window's hit (manyCount, an
-- Envoy rule's) that denies: it counts as envoyproxy/ratelimit's INCRBY
-- does, but in the same atomic step as its PEXPIRE NX. Returns five values per take: allowed, spent, and
-- for a window {count, pttl ms, 0}, for a bucket {remaining, retry_after
-- µs, reset_after µs}: what take_bucket and take_window return.
--
-- The arithmetic is theirs: a fixed window spends only if it allows and
-- starts at its first counted hit (INCRBY, then PEXPIRE NX, as
-- take_window); a bucket is lib_bucket's TAT and take_bucket's
-- decision (TestTakeManyMatchesSingleScripts holds them together).
local all = ARGV[1] == '1'
local now = now_us()
local state, out = {}, {}
local stop = false
for i, key in ipairs(KEYS) do
  local at = 2 + (i - 1) * 5
  local kind, flags = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local limit, param, cost = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4])
  local shadow, held, counted = flags % 2 == 1, math.floor(flags / 2) % 2 == 1, flags >= 4
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
    elseif counted then
      allowed = s.count + cost <= limit
      if apply then
        s.count = s.count + cost
        if s.pttl < 0 then s.pttl = param end
      end
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
  out[#out + 1] = ((allowed or counted) and apply and cost > 0) and 1 or 0
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
