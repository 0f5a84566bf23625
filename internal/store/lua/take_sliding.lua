-- take_sliding is one hit of a sliding window (limit.Take.Slice, the cold
-- room's day: guard/coldroom.go): ARGV[1] more in KEYS[1], a window of
-- ARGV[2] ms counted in slices of ARGV[3] ms of Redis's clock (one clock
-- for every instance), in one atomic step. Every hit counts, as a fixed
-- window's MULTI does (store/counters.go, hitWindow); the caller decides
-- against the limit and gives back what must not stay. Returns {count
-- after the hit, ms until the oldest counted slice leaves the window, the
-- slice's index}.
-- begin lib/sliding.lua
-- lib/sliding.lua is a sliding window counted in slices (take_sliding,
-- take_automatic; limit.Take.Slice): one hash per window, a field per
-- slice of Redis's clock (its index, unix ms / slice ms) holding the hits
-- counted in it. The window's count is the sum of the slices the last
-- window ms cover, the slice under way included: any window-long span of
-- whole slices holds at most what the limit allows, where a fixed window
-- from its first hit lets two back-to-back windows hold twice the limit
-- in one span. Every hit counts, the one that denies included, as a
-- fixed window's INCRBY does, and the caller gives back what must not
-- stay (refund_sliding, by the slice the hit named).
--
-- sliding_hit adds cost to the slice under way and returns the window's
-- count after it, the ms until its oldest counted slice leaves the window
-- (when the count first drops), and the slice's index (the hit's window
-- id, for a refund). Slices past the window are deleted; the key lives
-- until its newest slice leaves the window (PEXPIRE at each hit, in the
-- same script: never a hash without a TTL). A hash holds at most window /
-- slice + 1 fields, read whole (24 for a day of hours).
local function sliding_hit(key, cost, window, slice)
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local slice_at = math.floor(now_ms / slice)
  local slices = math.max(1, math.floor(window / slice))
  local first = slice_at - slices + 1
  local all = redis.call('HGETALL', key)
  local count, oldest, gone = 0, slice_at, {}
  for i = 1, #all, 2 do
    local at = tonumber(all[i])
    if not at or at < first then
      gone[#gone + 1] = all[i]
    else
      local hits = tonumber(all[i + 1]) or 0
      count = count + hits
      if hits > 0 and at < oldest then oldest = at end
    end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  count = count + cost
  redis.call('HINCRBY', key, slice_at, cost)
  redis.call('PEXPIRE', key, (slice_at + slices) * slice - now_ms)
  return count, (oldest + slices) * slice - now_ms, slice_at
end
-- end lib/sliding.lua
local count, left, slice_at = sliding_hit(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
return {count, left, slice_at}
