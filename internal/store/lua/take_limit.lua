-- take_limit is take_limits for one take that spends (cost > 0, not
-- held), the common /limits/check: the same decision and the same five
-- replies, without the batch's bookkeeping (a table per limit, the second
-- pass), which is most of what a one-limit call costs Redis beyond its
-- HGET and HSET. KEYS are its cur and prev hashes, ARGV take_limits'
-- eight values of one take.
local kind, flags, limit, param, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local slice, idx, field = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local now = now_us()
if not check_slice(now, slice, idx) then return {-1, -1, now} end
local cur, prev = KEYS[1], KEYS[2]
if kind == 1 then
  local now_ms = math.floor(now / 1000)
  local w = load_window(cur, prev, field, slice, idx, param, now_ms)
  local allowed = w.count + cost <= limit
  if not allowed and flags < 4 then
    return {0, 0, w.count, w.start and (w.start + param - now_ms) or -2, 0}
  end
  w.count = w.count + cost
  store_window(cur, prev, field, slice, idx, w, now_ms)
  return {allowed and 1 or 0, 1, w.count, w.start + param - now_ms, 0}
end
local tat, where = load_bucket(cur, prev, field, slice, idx, now)
local burst = limit * param
local new_tat = math.floor(tat + cost * param + 0.5)
if new_tat - now > burst + 0.5 then
  return {0, 0, tokens_left(burst, tat - now, param), math.ceil(new_tat - now - burst), math.ceil(tat - now)}
end
store_bucket(cur, prev, field, slice, idx, new_tat, now, where)
return {1, 1, tokens_left(burst, new_tat - now, param), 0, math.ceil(new_tat - now)}
