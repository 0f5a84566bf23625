-- take_automatic counts an OTP send's automatic windows (the prefix and
-- country limits of the policy file, guard/pumping.go) unless the number
-- is trusted (guard/trust.go): KEYS[1] is the number's trust mark, KEYS[2..]
-- the windows; ARGV[1] is now (unix seconds of the service's clock, for
-- the mark: lib/mark.lua), then two values per window, cost and window
-- (ms).
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
-- Returns {1} when the mark counts (nothing counted), else {0, then count
-- and pttl ms per window}.
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
if mark_counts(KEYS[1], tonumber(ARGV[1])) then
  return {1}
end
local out = {0}
for i = 2, #KEYS do
  local at = 1 + (i - 2) * 2
  local n = redis.call('INCRBY', KEYS[i], ARGV[at + 1])
  redis.call('PEXPIRE', KEYS[i], ARGV[at + 2], 'NX')
  out[#out + 1] = n
  out[#out + 1] = redis.call('PTTL', KEYS[i])
end
return out
