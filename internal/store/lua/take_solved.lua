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
-- an hour drops the hours before the last. The cap's figures are
-- lib/solved.lua's, which read_solved_cap shows on the ops desk.
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
-- least (permille; 0: sends alone are capped), then the carrier's (above).
-- Returns {allowed, count, limit, baseline, cut, 0, reused}.
--
-- With ARGV[13] = 1 (guard/vouched.go: a send the network vouches for,
-- which the vouched tier's cap refused) neither the country's cut nor
-- its carrier's holds: the cap is max(floor, baseline), the carrier's its
-- share of it, still holding the sends their verifies do not back.
--
-- With ARGV[14] > 0 (guard/vouchedplace.go: a solved send the cut
-- refused, which the network vouches for) the send's place in the
-- vouched tier's cap is tried first, in the same step: KEYS[10] is the
-- tier's counts (the velocity rule's layout, of the country's hash tag),
-- ARGV[14] its cap, ARGV[15] its lookback (hours) and ARGV[16] its TTL
-- (seconds). While the tier's hour holds fewer than the cap, the send
-- counts there ("s:<hour>", as take_volume counts a vouched take, whose
-- cap has no cut, share or budget) and its solution is taken, the solved
-- counts untouched; else it meets the cap above (with ARGV[13], the cap
-- without its cuts). So the send holds one place, never both, and waits
-- on one round trip for it. Every reply then carries a tenth value, 1
-- when the vouched tier counted it (its count and cap are the tier's),
-- before the risk answer's five.
--
-- The carrier (guard/carrier.go), when ARGV[9] > 0: KEYS[5] is the send's
-- carrier's solved counts ("s:<hour>", "v:<hour>"), KEYS[6] holds when
-- the cut of the carrier's solved cap ends, KEYS[7] is the carrier's
-- velocity counts (whose share it reads, computing and caching it as
-- take_volume does when the hour has none yet: ARGV[10] the country's
-- history_min_sends, ARGV[11] that hash's TTL; KEYS[8] the hour the
-- country's carriers were first counted). All share the country's hash
-- tag. The carrier's cap is carrier_room(share, the country's cap)
-- (lib/carrier.lua; its floor ARGV[9] x the solved floor), a tenth while
-- the carrier's cut holds, and holds the carrier's solved sends its own
-- verifies do not back; the country's cap still holds first. So the
-- conversion watch cuts the carrier a bot's solved sends go to, and the
-- other carriers' new users keep theirs. A refusal by the carrier answers
-- {0, count, cap, baseline, cut, 0, 0, 0, 1}: the carrier's. An allowed
-- send counts in both hashes.
-- begin lib/carrier.lua
-- lib/carrier.lua is a carrier's share of its country's room (guard/carriershare.go;
-- take_volume, take_solved).
--
-- A carrier's counts are a hash of the velocity rule's layout within the
-- country's hash tag: "s:<hour>" its sends, "v:<hour>" its verifies, and
-- "p:<hour>" its share for that hour in permille. The share is the
-- carrier's credited sends (min(sends, verifies) of each hour) / the
-- country's (country_key, the velocity rule's hash), over the hours of the
-- lookback before hour since the carriers were first counted (since_key
-- holds that hour; set by the first share computed, its TTL refreshed by
-- each): a country's verified history that predates its carriers' counts
-- is no carrier's. It is computed once per hour and cached: carriers
-- split the country's room by what their real users verified, so a ring
-- on one carrier's ranges spends that carrier's share, not the country's.
-- While those hours are too thin to judge by (fewer than min_history
-- sends, the normal conversion's test) or hold no credit, the share is
-- 1000: no split. The carrier's old fields are pruned when the share is
-- computed; the keys' TTL (ttl seconds) is refreshed.
local function carrier_credit(key, hour, lookback, from)
  local all = redis.call('HGETALL', key)
  local sends_in, verified_in, old = {}, {}, {}
  for i = 1, #all, 2 do
    local kind, field_at = string.match(all[i], '^(%a):(%d+)$')
    field_at = tonumber(field_at)
    if not field_at or (kind ~= 'm' and field_at < hour - lookback) or (kind == 'p' and field_at ~= hour) then
      old[#old + 1] = all[i]
    elseif kind == 's' then
      sends_in[field_at] = tonumber(all[i + 1])
    elseif kind == 'v' then
      verified_in[field_at] = tonumber(all[i + 1])
    end
  end
  local sends, credit = 0, 0
  for field_at, n in pairs(sends_in) do
    if field_at < hour and field_at >= from then
      sends = sends + n
      credit = credit + math.min(n, verified_in[field_at] or 0)
    end
  end
  return sends, credit, old
end

-- carrier_share_from is the share computed from the counts, from hour
-- since on (the first hour the country's carriers were counted), and the
-- carrier's fields it finds old: it writes nothing.
local function carrier_share_from(country_key, key, since, hour, lookback, min_history)
  local from = math.max(since, hour - lookback)
  local country_sends, country_credit = carrier_credit(country_key, hour, lookback, from)
  local _, credit, old = carrier_credit(key, hour, lookback, from)
  local share = 1000
  if country_sends > 0 and country_sends >= min_history and country_credit > 0 then
    share = math.min(1000, math.floor(1000 * credit / country_credit))
  end
  return share, old
end

local function carrier_share(country_key, key, since_key, hour, lookback, min_history, ttl)
  local share = tonumber(redis.call('HGET', key, 'p:' .. hour))
  if share then return share end
  local since = tonumber(redis.call('GET', since_key)) or hour
  redis.call('SET', since_key, since, 'EX', ttl)
  local old
  share, old = carrier_share_from(country_key, key, since, hour, lookback, min_history)
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
  redis.call('HSET', key, 'p:' .. hour, share)
  redis.call('EXPIRE', key, ttl)
  return share
end

-- carrier_share_now is the share carrier_share would answer now, read
-- only (read_solved_cap): the hour's cached share, or the one it would
-- compute.
local function carrier_share_now(country_key, key, since_key, hour, lookback, min_history)
  local share = tonumber(redis.call('HGET', key, 'p:' .. hour))
  if share then return share end
  local since = tonumber(redis.call('GET', since_key)) or hour
  return (carrier_share_from(country_key, key, since, hour, lookback, min_history))
end

-- carrier_room is a carrier's part of a country's room: max(its floor,
-- ceil(share x room)), never above room. Its floor is floor_share of the
-- country's floor, at least 1.
local function carrier_room(share, room, floor_share, country_floor)
  local floor = math.max(1, math.ceil(floor_share * country_floor - 1e-9))
  return math.min(room, math.max(floor, math.ceil(share * room / 1000 - 1e-9)))
end
-- end lib/carrier.lua
-- begin lib/solved.lua
-- lib/solved.lua is the solved tier's cap for an hour (guard/solved.go;
-- take_solved counts a send against it, read_solved_cap shows it on the
-- ops desk): one set of functions, so that the desk's figure is the cap a
-- send meets. It follows lib/carrier.lua, whose carrier_room it calls.
--
-- solved_cap is a country's cap: max(floor, baseline), where the baseline
-- is the velocity rule's for the hour (velocity_key's cached "b:<hour>";
-- computed the same way, read only, when the velocity rule has not run
-- this hour: its busiest verified hour of the lookback); while the cut
-- (cut_key: when it ends, unix seconds of the service's clock) holds, a
-- tenth of it (at least 1). Returns cap, baseline, cut (0 or 1).
local function solved_cap(velocity_key, cut_key, hour, lookback, floor, now)
  local base = tonumber(redis.call('HGET', velocity_key, 'b:' .. hour))
  if not base then
    local all = redis.call('HGETALL', velocity_key)
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
  local cap = math.max(floor, base)
  local cut = 0
  local cut_until = tonumber(redis.call('GET', cut_key))
  if cut_until and cut_until > now then
    cut = 1
    cap = math.max(1, math.floor(cap / 10))
  end
  return cap, base, cut
end

-- solved_normal is the normal conversion (permille) by which a solved
-- hash's verifies back its sends: the velocity rule's "n:<hour>", or
-- normal_default while unknown, at least normal_min; nil when the
-- unverified budget is off (normal_default 0: sends alone are capped).
local function solved_normal(velocity_key, hour, normal_default, normal_min)
  if normal_default <= 0 then return nil end
  local normal = tonumber(redis.call('HGET', velocity_key, 'n:' .. hour))
  if not normal or normal < 0 then normal = normal_default end
  return math.max(normal, normal_min)
end

-- solved_counts is what a solved hash (counts_key: "s:<hour>" sends,
-- "v:<hour>" verifies) holds against its cap this hour: its sends, and
-- how many of them its verifies back (normal: solved_normal; 0 when it is
-- nil). A send is allowed while sends + 1 - backed <= cap.
local function solved_counts(counts_key, hour, normal)
  local vals = redis.call('HMGET', counts_key, 's:' .. hour, 'v:' .. hour)
  local sends = tonumber(vals[1]) or 0
  if not normal then return sends, 0 end
  return sends, (tonumber(vals[2]) or 0) * 1000 / normal
end

-- solved_carrier_cap is a carrier's part of its country's cap (share, in
-- permille: lib/carrier.lua), its floor floor_share x the solved floor; a
-- tenth while the carrier's cut (cut_key) holds. Returns cap, cut.
local function solved_carrier_cap(share, country_cap, floor_share, floor, cut_key, now)
  local cap = carrier_room(share, country_cap, floor_share, floor)
  local cut_until = tonumber(redis.call('GET', cut_key))
  if cut_until and cut_until > now then
    return math.max(1, math.floor(cap / 10)), 1
  end
  return cap, 0
end
-- end lib/solved.lua
-- The number's cached risk answer (guard/riskstep.go), when ARGV[12] is 1:
-- KEYS[9], of the country's hash tag, is read first and every reply then
-- carries an eighth value 0, a ninth (1 when the carrier refused), the
-- vouched tier's tenth when it was tried first, and its five values
-- (found, score, fetched at, blocked, line type code), as
-- take_volume.lua's do.
local risk = ARGV[12] == '1' and redis.call('HMGET', KEYS[9], 's', 't', 'b', 'l')
local vouched_cap = tonumber(ARGV[14]) or 0
local function reply(r, in_vouched)
  if not risk and vouched_cap == 0 then return r end
  r[8] = r[8] or 0
  r[9] = r[9] or 0
  local risk_at = 10
  if vouched_cap > 0 then
    r[10] = in_vouched and 1 or 0
    risk_at = 11
  end
  if not risk then return r end
  r[risk_at] = risk[1] and 1 or 0
  for i = 1, 4 do r[risk_at + i] = tonumber(risk[i]) or 0 end
  return r
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return reply({0, 0, 0, 0, 0, 0, 1})
end
local hour = tonumber(ARGV[1])
local lookback = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local now = tonumber(ARGV[5])
-- The vouched tier's place, tried first (see above). Its first send of
-- an hour drops the fields of hours before its lookback, as take_volume's
-- does; the fields take_volume caches for an hour ("b:", "n:", "w:") it
-- computes on its own next take, finding none for the hour.
if vouched_cap > 0 then
  local vouched_key, vouched_lookback = KEYS[10], tonumber(ARGV[15])
  local vouched_count = tonumber(redis.call('HGET', vouched_key, 's:' .. hour)) or 0
  if vouched_count + 1 <= vouched_cap then
    redis.call('SET', KEYS[4], 1, 'PX', ARGV[6])
    vouched_count = redis.call('HINCRBY', vouched_key, 's:' .. hour, 1)
    if vouched_count == 1 then
      local old = {}
      for _, f in ipairs(redis.call('HKEYS', vouched_key)) do
        local kind, field_at = string.match(f, '^(%a):(%d+)$')
        field_at = tonumber(field_at)
        if field_at and kind ~= 'm' and kind ~= 'd' and field_at < hour - vouched_lookback then old[#old + 1] = f end
      end
      if #old > 0 then redis.call('HDEL', vouched_key, unpack(old)) end
    end
    redis.call('EXPIRE', vouched_key, ARGV[16])
    return reply({1, vouched_count, vouched_cap, 0, 0, 0, 0}, true)
  end
end
local limit, base, cut = solved_cap(KEYS[3], KEYS[2], hour, lookback, floor, now)
local uncut = ARGV[13] == '1'
if uncut then limit, cut = math.max(floor, base), 0 end
local normal = solved_normal(KEYS[3], hour, tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 0)
local count, backed = solved_counts(KEYS[1], hour, normal)
if count + 1 - backed > limit then
  return reply({0, count, limit, base, cut, 0, 0})
end
-- The carrier's share of the cap (see above).
local carrier_floor_share = tonumber(ARGV[9]) or 0
if carrier_floor_share > 0 then
  local share = carrier_share(KEYS[3], KEYS[7], KEYS[8], hour, lookback, tonumber(ARGV[10]), ARGV[11])
  local carrier_limit, carrier_cut = solved_carrier_cap(share, limit, carrier_floor_share, floor, KEYS[6], now)
  if uncut then carrier_limit, carrier_cut = carrier_room(share, limit, carrier_floor_share, floor), 0 end
  local carrier_count, carrier_backed = solved_counts(KEYS[5], hour, normal)
  if carrier_count + 1 - carrier_backed > carrier_limit then
    return reply({0, carrier_count, carrier_limit, base, carrier_cut, 0, 0, 0, 1})
  end
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
if carrier_floor_share > 0 then -- the carrier's count, beside the country's
  local carrier_now = redis.call('HINCRBY', KEYS[5], 's:' .. hour, 1)
  if carrier_now == 1 then
    local old = {}
    for _, f in ipairs(redis.call('HKEYS', KEYS[5])) do
      local field_hour = tonumber(string.match(f, '^[sv]:(%d+)$'))
      if not field_hour or field_hour < hour - 1 then old[#old + 1] = f end
    end
    if #old > 0 then redis.call('HDEL', KEYS[5], unpack(old)) end
  end
  redis.call('EXPIRE', KEYS[5], ARGV[4])
end
return reply({1, count, limit, base, cut, 0, 0})
