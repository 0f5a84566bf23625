-- take_automatic counts an OTP send's automatic windows (the prefix and
-- country limits of the policy file, guard/pumping.go) unless the number
-- is trusted (guard/trust.go): KEYS[1] is the number's trust mark, KEYS[2..]
-- the windows; ARGV[1] is now (unix seconds of the service's clock, for
-- the mark: lib/mark.lua), then three values per window, cost, window
-- (ms) and slice (ms; 0 for a fixed window, else a sliding window counted
-- in slices of Redis's clock: lib/sliding.lua, the cold room's day).
--
-- A trusted number's send does not keep the automatic windows: the
-- velocity script (take_volume) finds the mark in the same MULTI, and
-- reading it here too means the windows are never counted, so there is
-- nothing to refund in a round trip of its own.
--
-- Each window is what a MULTI's hit is (store/counters.go, hitWindow):
-- INCRBY counts, PEXPIRE ... NX starts the window at its first hit and no
-- later hit pushes it back, PTTL says what is left; the script keeps the
-- three one atomic step, as a MULTI does.
--
-- Single Redis only: the mark lives in its country's hash slot, the
-- windows in their prefixes', so this script spans slots, which only a
-- single node allows. On Redis Cluster the store reads the mark first and
-- never runs it (store/send.go, clusterTrust).
--
-- Returns {1} when the mark counts (nothing counted), else {0, then count,
-- pttl ms and window id per window}: a fixed window's id is 0 (any), a
-- sliding window's left is until its oldest slice leaves it, its id the
-- slice the hit counted in.
-- begin lib/mark.lua
-- lib/mark.lua reads a trusted number's mark (guard/trust.go) the one way
-- every script that reads it must (take_volume, take_automatic,
-- trust_mark, read_trust_mark). A mark's value is the time (unix seconds
-- of the service's clock) from which it counts: "1" for a mark that counts
-- at once (a verify in a normal hour, an import, an account's number), a
-- later time for a mark earned in an hour whose new numbers ran above
-- their country's normal (held: its number verifies as any other, but is
-- not trusted until then). mark_start is that time, or nil without a mark;
-- mark_counts says whether the mark trusts its number at now.
local function mark_start(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  return tonumber(v) or 0
end
local function mark_counts(key, now)
  local start = mark_start(key)
  return start ~= nil and start <= now
end
-- end lib/mark.lua
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
if mark_counts(KEYS[1], tonumber(ARGV[1])) then
  return {1}
end
local out = {0}
for i = 2, #KEYS do
  local at = 1 + (i - 2) * 3
  local slice = tonumber(ARGV[at + 3])
  if slice > 0 then
    local n, left, slice_at = sliding_hit(KEYS[i], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), slice)
    out[#out + 1] = n
    out[#out + 1] = left
    out[#out + 1] = slice_at
  else
    local n = redis.call('INCRBY', KEYS[i], ARGV[at + 1])
    redis.call('PEXPIRE', KEYS[i], ARGV[at + 2], 'NX')
    out[#out + 1] = n
    out[#out + 1] = redis.call('PTTL', KEYS[i])
    out[#out + 1] = 0
  end
end
return out
