-- read_trust_mark reports whether the trust mark KEYS[1] counts at ARGV[1]
-- (unix seconds of the service's clock): 1 when it does, 0 when it is
-- absent or still held (lib/mark.lua). The store's reads of a mark outside
-- the velocity script (TrustMarks.Trusted, the Cluster send's read first)
-- run it, so every reader decides by the same function.
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
  return 1
end
return 0
