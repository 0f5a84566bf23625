-- sync_limits is Sync (hot keys' sync mode) on lib_limit's time-slice
-- hashes: it adds what an instance already counted on its own to each
-- limit and reads back the global state. KEYS[2i-1] and KEYS[2i] are item
-- i's cur and prev hashes; ARGV holds seven values per item: kind (1 fixed
-- window, 2 token bucket), limit, window ms or refill interval µs, delta,
-- slice ms, slice index, field. A window takes the delta as hitWindow
-- does (counted whatever the limit, starting a window if none runs); a
-- bucket as sync_bucket (never refused: a bucket overspent goes into
-- debt, up to its hash's end, lib_limit's store_bucket). A zero delta only
-- reads: an idle limit must not start a window that no hit started.
-- Returns two values per item, a window's {count, pttl ms (-2: none)} or
-- a bucket's {remaining, reset_after µs}; or {-1, -1, now µs}, writing
-- nothing, if Redis's clock puts an item in another slice than the caller
-- named (check_slice).
local now = now_us()
local now_ms = math.floor(now / 1000)
local n = #KEYS / 2
if not slices_hold(now, n, 1 + 4, 7) then return {-1, -1, now} end
local out = {}
for i = 1, n do
  local at = 1 + (i - 1) * 7
  local kind, limit, param, delta = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local slice, idx, field = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), ARGV[at + 6]
  local cur, prev = KEYS[2 * i - 1], KEYS[2 * i]
  if kind == 2 then
    local tat, where = load_bucket(cur, prev, field, slice, idx, now)
    if delta > 0 then
      tat = math.min(math.floor(tat + delta * param + 0.5), (idx + 2) * slice * 1000)
      store_bucket(cur, prev, field, slice, idx, tat, now, where)
    end
    out[#out + 1] = tokens_left(limit * param, tat - now, param)
    out[#out + 1] = math.ceil(tat - now)
  else
    local w = load_window(cur, prev, field, slice, idx, param, now_ms)
    if delta > 0 then
      w.count = w.count + delta
      store_window(cur, prev, field, slice, idx, w, now_ms)
    end
    out[#out + 1] = w.count
    out[#out + 1] = w.start and (w.start + param - now_ms) or -2
  end
end
return out
