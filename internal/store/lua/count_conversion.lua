-- count_conversion counts one event in a subject's sliding window and
-- returns the window's {matured sends, verifies}.
--
-- The subject is one hash (KEYS[1]) of per-minute buckets: field
-- "<kind>:<minute>" (kind s or v, minute = ARGV[4] / 60, the service's
-- clock) holds the events of that minute. The window is the current minute
-- and the ARGV[2]/60 - 1 before it; its sends count only from minutes at
-- least ARGV[5] buckets old (conversion.delay: younger codes may still be
-- verified), its verifies all. Older fields are deleted as they are met,
-- so the hash holds at most two fields per minute of the window and the
-- delay, and the key expires once the subject goes quiet. One script: the
-- count and the read are one atomic step.
local bucket = tonumber(ARGV[3])
local window = tonumber(ARGV[2])
local cur = math.floor(tonumber(ARGV[4]) / bucket)
local delay = tonumber(ARGV[5])
local first = cur - math.floor(window / bucket) + 1
redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':' .. cur, 1)
local all = redis.call('HGETALL', KEYS[1])
local s, v = 0, 0
local old = {}
for i = 1, #all, 2 do
  local kind, b = string.match(all[i], '^(%a):(%d+)$')
  b = tonumber(b)
  if not b or b < first - delay then
    old[#old + 1] = all[i]
  elseif kind == 's' and b <= cur - delay then
    s = s + tonumber(all[i + 1])
  elseif kind == 'v' and b >= first then
    v = v + tonumber(all[i + 1])
  end
end
if #old > 0 then redis.call('HDEL', KEYS[1], unpack(old)) end
redis.call('EXPIRE', KEYS[1], window + (delay + 1) * bucket)
return {s, v}
