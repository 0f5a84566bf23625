-- The solved tier's cap (guard/challenge.go): one send whose challenge
-- was solved, counted in the country's hour if the hour stays within the
-- cap, and its solution taken once, in one atomic step.
--
-- KEYS[1] is the country's solved counts (a hash of "s:<hour>"), KEYS[2]
-- holds when the cut of its cap ends (unix seconds of the service's
-- clock), KEYS[3] is the country velocity rule's hash (read only: its
-- baseline is the solved cap) and KEYS[4] the solution's single-use key.
-- All four share the country's hash tag: one slot on Cluster.
--
-- A solution already taken answers reused and counts nothing. The cap is
-- max(floor, baseline) where the baseline is the velocity rule's for the
-- hour (its cached "b:<hour>"; computed the same way, read only, when the
-- velocity rule has not run this hour); while the cut holds it is a
-- tenth (at least 1). Only the hour under way matters: the first send of
-- an hour drops the hours before the last.
--
-- With ARGV[7] > 0 (the unverified budget is on, guard/unverified.go) the
-- cap holds the hour's solved sends that their verifies do not back:
-- sends - verifies / normal ("v:<hour>" of KEYS[1] counts the verifies of
-- solved codes; the normal is the velocity rule's "n:<hour>", or ARGV[7]
-- permille while unknown, at least ARGV[8]). A bot that solves every
-- challenge and verifies nothing still gets at most the cap an hour; real
-- users who solve and verify are not held to last week's volume.
--
-- ARGV: hour, lookback (hours), floor, TTL of KEYS[1] (seconds), now
-- (unix seconds), TTL of the solution's key (ms), normal default, normal
-- least (permille; 0: sends alone are capped).
-- Returns {allowed, count, limit, baseline, cut, 0, reused}.
--
-- The number's cached risk answer (guard/riskstep.go), when ARGV[9] is 1:
-- KEYS[5], of the country's hash tag, is read first and every reply then
-- carries an eighth value 0 and its five values (found, score, fetched
-- at, blocked, line type code), as take_volume.lua's do.
local risk = ARGV[9] == '1' and redis.call('HMGET', KEYS[5], 's', 't', 'b', 'l')
local function reply(r)
  if not risk then return r end
  r[8] = 0
  r[9] = risk[1] and 1 or 0
  for i = 1, 4 do r[9 + i] = tonumber(risk[i]) or 0 end
  return r
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return reply({0, 0, 0, 0, 0, 0, 1})
end
local hour = tonumber(ARGV[1])
local lookback = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local base = tonumber(redis.call('HGET', KEYS[3], 'b:' .. hour))
if not base then
  local all = redis.call('HGETALL', KEYS[3])
  local sends_in, verified_in = {}, {}
  for i = 1, #all, 2 do
    local kind, field_hour = string.match(all[i], '^(%a):(%d+)$')
    field_hour = tonumber(field_hour)
    if field_hour and field_hour < hour and field_hour >= hour - lookback then
      if kind == 's' then sends_in[field_hour] = tonumber(all[i + 1]) elseif kind == 'v' then verified_in[field_hour] = tonumber(all[i + 1]) end
    end
  end
  base = 0
  for field_hour, n in pairs(sends_in) do
    local credit = math.min(n, verified_in[field_hour] or 0) -- verified sends, as take_volume
    if credit > base then base = credit end
  end
end
local limit = math.max(floor, base)
local cut = 0
local cut_until = tonumber(redis.call('GET', KEYS[2]))
if cut_until and cut_until > tonumber(ARGV[5]) then
  cut = 1
  limit = math.max(1, math.floor(limit / 10))
end
local sent_verified = redis.call('HMGET', KEYS[1], 's:' .. hour, 'v:' .. hour)
local count = tonumber(sent_verified[1]) or 0
local backed = 0
local normal_default = tonumber(ARGV[7]) or 0
if normal_default > 0 then
  local normal = tonumber(redis.call('HGET', KEYS[3], 'n:' .. hour))
  if not normal or normal < 0 then normal = normal_default end
  normal = math.max(normal, tonumber(ARGV[8]))
  backed = (tonumber(sent_verified[2]) or 0) * 1000 / normal
end
if count + 1 - backed > limit then
  return reply({0, count, limit, base, cut, 0, 0})
end
redis.call('SET', KEYS[4], 1, 'PX', ARGV[6])
count = redis.call('HINCRBY', KEYS[1], 's:' .. hour, 1)
if count == 1 then
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    local field_hour = tonumber(string.match(f, '^[sv]:(%d+)$'))
    if not field_hour or field_hour < hour - 1 then old[#old + 1] = f end
  end
  if #old > 0 then redis.call('HDEL', KEYS[1], unpack(old)) end
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return reply({1, count, limit, base, cut, 0, 0})
