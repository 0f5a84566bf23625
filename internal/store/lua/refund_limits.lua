-- refund_limits gives back what take_limits spent, on lib_limit's
-- time-slice hashes, never creating a limit: a bucket that is full (no
-- field) stays so, a window that ended stays ended. KEYS[2i-1] and
-- KEYS[2i] are take i's cur and prev hashes; ARGV holds six values per
-- take: kind (1 fixed window, 2 token bucket), window ms or refill
-- interval µs, cost, slice ms, slice index, field. Returns {-1, -1, now µs}
-- and writes nothing if Redis's clock puts a take in another slice than
-- the caller named (check_slice), else {0}.
local now = now_us()
local now_ms = math.floor(now / 1000)
local n = #KEYS / 2
if not slices_hold(now, n, 1 + 3, 6) then return {-1, -1, now} end
for i = 1, n do
  local at = 1 + (i - 1) * 6
  local kind, param, cost = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local slice, idx, field = tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), ARGV[at + 5]
  local cur, prev = KEYS[2 * i - 1], KEYS[2 * i]
  if kind == 2 then
    local tat, where = load_bucket(cur, prev, field, slice, idx, now)
    if where ~= nil then
      store_bucket(cur, prev, field, slice, idx, math.floor(tat - cost * param + 0.5), now, where)
    end
  else
    local w = load_window(cur, prev, field, slice, idx, param, now_ms)
    if w.start and w.count > 0 then
      w.count = math.max(0, w.count - cost)
      store_window(cur, prev, field, slice, idx, w, now_ms)
    end
  end
end
return {0}
