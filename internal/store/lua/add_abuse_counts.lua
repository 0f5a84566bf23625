-- add_abuse_counts adds one hour's counts (and the alerts) in one atomic step.
--
-- KEYS: the hour's country hash, its prefix hash, its carrier hash, its
-- service hash, the alerts hash.
-- ARGV: ttl seconds, country cap, prefix cap, now (unix seconds), alerts
-- cap, carrier cap, service cap, then n country pairs (field, delta) after
-- n, the same for prefixes, carriers and services, then the alerts (field,
-- value). A hash that holds its cap of fields takes no new subject: the
-- count goes to "~other|<kind>" instead, for a carrier ("<region>|<key>|
-- <name>|<kind>") to its country's "<region>|~other|other|<kind>", for a
-- service's country ("<service>|<region>|<kind>") to the service's
-- "<service>|~other|<kind>", so a campaign over a million numbers cannot
-- grow it. Alerts whose end is past are
-- pruned once the alerts hash holds more than ARGV[5] (maxAlerts).
local ttl = tonumber(ARGV[1])
local now = tonumber(ARGV[4])
local i = 8
-- within: nil, 'carrier' or 'service': whose "other" a new subject counts under.
local function add(key, cap, within)
  local n = tonumber(ARGV[i]); i = i + 1
  if n == 0 then return end
  local len = redis.call('HLEN', key)
  for j = 1, n do
    local f, d = ARGV[i], tonumber(ARGV[i + 1])
    i = i + 2
    if len < cap or redis.call('HEXISTS', key, f) == 1 then
      if redis.call('HINCRBY', key, f, d) == d then len = len + 1 end
    else
      local kind = string.match(f, '|([^|]+)$') or 's'
      local other = '~other|' .. kind
      if within == 'carrier' then
        other = (string.match(f, '^([^|]*)|') or '') .. '|~other|other|' .. kind
      elseif within == 'service' then
        other = (string.match(f, '^([^|]*)|') or '') .. '|~other|' .. kind
      end
      redis.call('HINCRBY', key, other, d)
    end
  end
  redis.call('EXPIRE', key, ttl)
end
add(KEYS[1], tonumber(ARGV[2]), nil)
add(KEYS[2], tonumber(ARGV[3]), nil)
add(KEYS[3], tonumber(ARGV[6]), 'carrier')
add(KEYS[4], tonumber(ARGV[7]), 'service')
local n = tonumber(ARGV[i]); i = i + 1
if n > 0 then
  for j = 1, n do
    redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  if redis.call('HLEN', KEYS[5]) > tonumber(ARGV[5]) then
    local all = redis.call('HGETALL', KEYS[5])
    for k = 1, #all, 2 do
      local u = tonumber(string.match(all[k + 1], '^(%d+) '))
      if not u or u <= now then redis.call('HDEL', KEYS[5], all[k]) end
    end
  end
  redis.call('EXPIRE', KEYS[5], ttl)
end
return 1
