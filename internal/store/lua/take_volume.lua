-- take_volume is the country velocity rule's decision (guard/velocity.go):
-- one atomic step that reads the baseline, checks the hour under way and
-- counts the send only when it is allowed.
--
-- A country is one hash (KEYS[1]) of hour buckets of the service's clock:
-- "s:<hour>" the sends counted, "v:<hour>" the codes verified, and
-- "b:<hour>" the baseline computed for that hour. The baseline is the
-- largest credit of the ARGV[2] hours before ARGV[1], where an hour's
-- credit is its verified sends, min(sends, verifies): codes nobody
-- verified earn nothing, and an attacker verifying a share c of its codes
-- earns c of them, so its limit grows only when factor x c > 1. It is
-- computed once per hour (HGETALL, pruning what fell out of the lookback)
-- and cached in "b:<hour>", so the other sends of the hour read two
-- fields. With it, "n:<hour>" caches the country's normal conversion over
-- the same hours, verified sends / sends in permille, or -1 when they hold
-- fewer than ARGV[6] sends (too little history to judge by): the
-- conversion watch compares the hour under way with it (NormalConversion). KEYS[2]
-- holds when the country's quarantine ends (unix seconds of the service's
-- clock); until then (ARGV[8] is now) the floor is ARGV[4], not ARGV[3]. The hour's limit is max(floor, floor(ARGV[5] x baseline)).
-- Hours are named by the caller's clock so that history can be driven by a
-- test; the key's TTL (ARGV[7] seconds, refreshed by every write) outlives
-- the lookback. With ARGV[10] > 0, the minute ARGV[9] ("m:<minute>") may
-- hold at most max(floor, ceil(limit x ARGV[10])) of the hour's sends (a
-- tenth of that share while quarantined), so that a burst cannot spend the
-- hour in one minute; minute fields older than the last are pruned with
-- the hours. Returns {allowed, count, limit, baseline, quarantined,
-- minute cap (0: none), ...} (eleven values, the tenth the country's
-- warmth, the eleventh whether the room is contested, below; five more
-- with the risk answer); refused with count <
-- limit means the minute's cap refused.
--
-- The trusted tier (guard/trust.go) is the same rule on its own hash
-- (KEYS[3]) with its own floor and factor (ARGV[12], ARGV[13]), no
-- quarantine and no minute share. A send is trusted when ARGV[11] is 1 (the
-- caller knows), or when ARGV[15] is 1 and the number's mark KEYS[4]
-- exists: the mark shares the country's hash tag, so trust and the count
-- are one atomic step, on Cluster too. With ARGV[14] = 1 an untrusted send
-- counts nothing (the velocity rule is off). The reply's seventh value is
-- 1 for the trusted tier.
--
-- The unverified budget (guard/unverified.go), for an untrusted send when
-- ARGV[16] > 0: the hour's sends that its verifies do not back,
-- sends - verifies / normal ("v:<hour>" counts the verifies of the hour,
-- the normal is "n:<hour>", or ARGV[18] permille while unknown, at least
-- ARGV[19]), may be at most max(ARGV[16], ceil(ARGV[17] x baseline)), a
-- tenth of that while quarantined (at least 1). A campaign whose codes
-- nobody reads spends it and gets no more; real users' verifies give back
-- what their sends took, a minute later. With it on, the hour's own
-- verified sends count as a credited hour for the limit of either tier
-- (growth within the hour, from verified sends only: a fresh deployment's
-- imported users are not held to the trusted floor while they verify). A
-- refusal by the budget answers an eighth value, the budget (0 in every
-- other reply).
--
-- The carrier (guard/carrier.go), for an untrusted send when ARGV[20] > 0:
-- KEYS[5] is the send's carrier's counts within the country (same hash
-- tag), and the carriers split the country's room: the carrier's limit is
-- carrier_room(share, limit) (lib/carrier.lua: max(ARGV[20] x the floor,
-- ceil(share x limit)), never above the country's). Its own verified sends
-- do not grow it within the hour past its share: a ring that owns one
-- carrier's numbers and verifies every code would grow it without bound,
-- while a real surge spreads over the carriers and grows the country's
-- limit, of which each carrier keeps its share. With the
-- unverified budget on, the carrier's sends its own verifies do not back
-- may be at most carrier_room(share, budget). The country's checks come
-- first and still hold, so the carriers together never pass the country's
-- limit. A refusal by the carrier answers nine values: count, limit and
-- (eighth, 0 when the limit refused) budget are the carrier's, the ninth
-- is 1. An allowed send counts in both hashes. KEYS[6] holds the hour the
-- country's carriers were first counted (lib/carrier.lua). Without
-- ARGV[20], KEYS[5] and KEYS[6] repeat KEYS[1] and are not read.
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
--
-- The bounded pace (guard/pace.go), when ARGV[21] (growth per day) >
-- 0, on whichever hash the send counts in (its own counts only): "d:<day>"
-- (day = hour / 24) records the largest baseline the hash had in each day
-- (after the cap), kept three days. The day's ceiling "c:<hour>" is
-- ARGV[21] x the largest baseline recorded on the days before, at least
-- the floor. A hash with no record at all (its first hour under the pace:
-- a country without history, or one that had it before the pace, or one
-- quiet for days) records the baseline its history gives as the day
-- before's: a country without history starts from the floor, one with
-- history from that history, never cut below it. The hour's baseline is at
-- most the ceiling, and the growth within the hour at most factor x the
-- ceiling, so neither the verifies of earlier hours nor the hour's own can
-- take a hash past ARGV[21] x its day before. The mark KEYS[4] is read by
-- lib/mark.lua with now ARGV[8]: a held mark does not trust yet.
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
-- The number's cached risk answer (guard/riskstep.go), when ARGV[22] is 1:
-- KEYS[7], a hash of the country's hash tag (s score, t fetched at in unix
-- seconds, b blocked, l line type code), is read first, and every reply
-- then carries, after its eleven values, found (0 or 1), score, fetched at,
-- blocked and line type code: a refusal already holds the score, in the
-- send's own round trip.
--
-- Contested (guard/contested.go): an untrusted send the rule refuses (the
-- limit, the minute's cap, the unverified budget or the carrier's share)
-- marks its hour in the hash ("x:<hour>"); while the hour under way or the
-- one before holds the mark, every reply's eleventh value is 1 (0
-- otherwise): the room's places are contested, and a send it takes has
-- its risk score asked too, so that a bot's numbers the network scores
-- high do not spend the places real users' would have had.
--
-- Warmth (guard/coldroom.go), for an untrusted send: the country's
-- verified history at least a day old, "w:<hour>", computed with the
-- baseline once per hour and cached. It is the largest of: the busiest
-- credited hour of this hash among the hours of the lookback that ended
-- 24 hours or more before the hour under way; the same of the trusted
-- tier's hash (KEYS[3], when it is another key); and the numbers an
-- operator imported into the trusted tier over the lookback ("i:<hour>"
-- of KEYS[3], store/trust.go). The hours of the last day do not count,
-- so a ring that verifies its own codes cannot warm its country within a
-- day in either tier; an import is the operator's word and counts at
-- once. Every reply carries it as its tenth value (0 for a trusted send,
-- or a count the rule did not judge), after the eighth and ninth (0 when
-- absent); the risk answer's five values follow. With ARGV[23] > 0, this
-- hash's day-old hours warm the country only when, taken together, they
-- hold at least ARGV[6] sends and at least ARGV[23] of them verified
-- (their credits): a ring that verifies half its codes in the room, a
-- few an hour, would otherwise warm its country a day later and then be
-- judged by its own conversion.
local warmth, contested = 0, 0
local risk = ARGV[22] == '1' and redis.call('HMGET', KEYS[7], 's', 't', 'b', 'l')
local function reply(r)
  r[8] = r[8] or 0
  r[9] = r[9] or 0
  r[10] = warmth
  r[11] = contested
  if not risk then return r end
  r[12] = risk[1] and 1 or 0
  for i = 1, 4 do r[12 + i] = tonumber(risk[i]) or 0 end
  return r
end
-- busiest_before is the largest credit, min(sends, verifies), of the
-- hours in [from, to] of sends_in and verified_in; with the sends and
-- the credits of those hours together.
local function busiest_before(sends_in, verified_in, from, to)
  local most, sends, credits = 0, 0, 0
  for field_at, n in pairs(sends_in) do
    if field_at >= from and field_at <= to then
      local credit = math.min(n, verified_in[field_at] or 0)
      if credit > most then most = credit end
      sends, credits = sends + n, credits + credit
    end
  end
  return most, sends, credits
end
-- tier_warmth is the trusted tier's part of the warmth: its busiest
-- credited hour in [from, to], or the numbers imported since from, the
-- larger. It writes nothing (the tier's own sends prune its hash).
local function tier_warmth(tier_key, from, to)
  local all = redis.call('HGETALL', tier_key)
  local sends_in, verified_in, imported = {}, {}, 0
  for i = 1, #all, 2 do
    local kind, field_at = string.match(all[i], '^(%a):(%d+)$')
    field_at = tonumber(field_at)
    if field_at and field_at >= from then
      if kind == 's' then
        sends_in[field_at] = tonumber(all[i + 1])
      elseif kind == 'v' then
        verified_in[field_at] = tonumber(all[i + 1])
      elseif kind == 'i' then
        imported = imported + (tonumber(all[i + 1]) or 0)
      end
    end
  end
  return math.max(imported, (busiest_before(sends_in, verified_in, from, to)))
end
local hour = tonumber(ARGV[1])
local lookback = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local factor = tonumber(ARGV[5])
local share = tonumber(ARGV[10])
local key = KEYS[1]
local trusted = 0
if ARGV[11] == '1' or (ARGV[15] == '1' and mark_counts(KEYS[4], tonumber(ARGV[8]))) then
  trusted, key = 1, KEYS[3]
  floor, factor, share = tonumber(ARGV[12]), tonumber(ARGV[13]), 0
elseif ARGV[14] == '1' then
  return reply({1, 0, 0, 0, 0, 0, 0})
end
local growth, pace_start = tonumber(ARGV[21]) or 0, floor -- the pace: growth per day, its start
local quarantined = 0
local quarantine_until = trusted == 0 and tonumber(redis.call('GET', KEYS[2]))
if quarantine_until and quarantine_until > tonumber(ARGV[8]) then
  quarantined = 1
  floor = tonumber(ARGV[4])
end
local min_history = tonumber(ARGV[6])
local minute = tonumber(ARGV[9])
local vals = redis.call('HMGET', key, 'b:' .. hour, 's:' .. hour, 'm:' .. minute, 'v:' .. hour, 'n:' .. hour, 'c:' .. hour, 'w:' .. hour,
  'x:' .. hour, 'x:' .. (hour - 1))
if trusted == 0 and (vals[8] or vals[9]) then contested = 1 end
-- refuse answers an untrusted send's refusal r, marking the hour contested.
local function refuse(r)
  if trusted == 0 then
    redis.call('HSET', key, 'x:' .. hour, 1)
    redis.call('EXPIRE', key, ARGV[7])
    contested = 1
  end
  return reply(r)
end
local base = tonumber(vals[1])
local normal = tonumber(vals[5])
local ceiling = tonumber(vals[6])
warmth = tonumber(vals[7]) or 0
if not base or (growth > 0 and not ceiling) or (trusted == 0 and not vals[7]) then
  local all = redis.call('HGETALL', key)
  local sends_in, verified_in, old, days = {}, {}, {}, {}
  local day = math.floor(hour / 24)
  for i = 1, #all, 2 do
    local kind, field_at = string.match(all[i], '^(%a):(%d+)$')
    field_at = tonumber(field_at)
    if kind == 'd' and field_at and field_at >= day - 3 then
      days[field_at] = tonumber(all[i + 1])
    elseif not field_at or (kind == 'm' and field_at < minute - 1) or (kind ~= 'm' and field_at < hour - lookback) or ((kind == 'b' or kind == 'n' or kind == 'c' or kind == 'w') and field_at ~= hour) then
      old[#old + 1] = all[i]
    elseif kind == 's' then
      sends_in[field_at] = tonumber(all[i + 1])
    elseif kind == 'v' then
      verified_in[field_at] = tonumber(all[i + 1])
    end
  end
  base = 0
  local sends, verified = 0, 0
  for field_at, n in pairs(sends_in) do
    if field_at < hour then
      local credit = math.min(n, verified_in[field_at] or 0)
      if credit > base then base = credit end
      sends = sends + n
      verified = verified + credit
    end
  end
  normal = -1
  if sends > 0 and sends >= min_history then normal = math.floor(1000 * verified / sends) end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
  -- The bounded pace: the day's ceiling caps the baseline; the day's
  -- largest baseline is recorded for the days after.
  if growth > 0 then
    local before, recorded_any = pace_start, false
    for at, recorded in pairs(days) do
      recorded_any = true
      if at < day and recorded > before then before = recorded end
    end
    if not recorded_any then -- no record at all: the history it has is the day before's
      before = math.max(before, base)
      redis.call('HSET', key, 'd:' .. (day - 1), base)
    end
    ceiling = math.floor(growth * before + 1e-9)
    base = math.min(base, ceiling)
    if base > (days[day] or -1) then redis.call('HSET', key, 'd:' .. day, base) end
    redis.call('HSET', key, 'c:' .. hour, ceiling)
  end
  redis.call('HSET', key, 'b:' .. hour, base, 'n:' .. hour, normal)
  if trusted == 0 then -- warmth (see above)
    local day_old_sends, day_old_credits
    warmth, day_old_sends, day_old_credits = busiest_before(sends_in, verified_in, hour - lookback, hour - 24)
    local warm_conversion = tonumber(ARGV[23]) or 0
    if warm_conversion > 0 and (day_old_sends < min_history or day_old_credits < warm_conversion * day_old_sends) then
      warmth = 0
    end
    if KEYS[3] ~= key then warmth = math.max(warmth, tier_warmth(KEYS[3], hour - lookback, hour - 24)) end
    redis.call('HSET', key, 'w:' .. hour, warmth)
  end
  redis.call('EXPIRE', key, ARGV[7])
end
local limit = math.max(floor, math.floor(factor * base + 1e-9))
local count = tonumber(vals[2]) or 0
local unverified_floor = tonumber(ARGV[16]) or 0
local unverified_cap = 0
local verified = tonumber(vals[4]) or 0
if unverified_floor > 0 then
  local grown = math.floor(factor * math.min(count, verified) + 1e-9)
  if growth > 0 and ceiling then grown = math.min(grown, math.floor(factor * ceiling + 1e-9)) end -- the pace
  limit = math.max(limit, grown)
end
if trusted == 0 and unverified_floor > 0 then
  unverified_cap = math.max(unverified_floor, math.ceil(tonumber(ARGV[17]) * base - 1e-9))
  if quarantined == 1 then unverified_cap = math.max(1, math.floor(unverified_cap / 10)) end
  if not normal or normal < 0 then normal = tonumber(ARGV[18]) end
  normal = math.max(normal, tonumber(ARGV[19]))
  if count + 1 <= limit and count + 1 - verified * 1000 / normal > unverified_cap then
    return refuse({0, count, limit, base, quarantined, 0, trusted, unverified_cap})
  end
end
if count + 1 > limit then
  return refuse({0, count, limit, base, quarantined, 0, trusted})
end
-- The carrier's share of the room (see above).
local carrier_floor_share = tonumber(ARGV[20]) or 0
local carrier_on = trusted == 0 and carrier_floor_share > 0
if carrier_on then
  local carrier_key = KEYS[5]
  local share = carrier_share(KEYS[1], carrier_key, KEYS[6], hour, lookback, min_history, ARGV[7])
  local carrier_vals = redis.call('HMGET', carrier_key, 's:' .. hour, 'v:' .. hour)
  local carrier_count = tonumber(carrier_vals[1]) or 0
  local carrier_verified = tonumber(carrier_vals[2]) or 0
  local carrier_limit = carrier_room(share, limit, carrier_floor_share, floor)
  if unverified_cap > 0 then
    local carrier_cap = carrier_room(share, unverified_cap, carrier_floor_share, unverified_floor)
    if carrier_count + 1 <= carrier_limit and carrier_count + 1 - carrier_verified * 1000 / normal > carrier_cap then
      return refuse({0, carrier_count, carrier_limit, base, quarantined, 0, trusted, carrier_cap, 1})
    end
  end
  if carrier_count + 1 > carrier_limit then
    return refuse({0, carrier_count, carrier_limit, base, quarantined, 0, trusted, 0, 1})
  end
end
local minute_cap = 0
if share > 0 then
  if quarantined == 1 then share = share / 10 end
  minute_cap = math.max(floor, math.ceil(limit * share - 1e-9))
  if (tonumber(vals[3]) or 0) + 1 > minute_cap then
    return refuse({0, count, limit, base, quarantined, minute_cap, trusted})
  end
  redis.call('HINCRBY', key, 'm:' .. minute, 1)
end
count = redis.call('HINCRBY', key, 's:' .. hour, 1)
redis.call('EXPIRE', key, ARGV[7])
if carrier_on then -- the carrier's count, beside the country's
  redis.call('HINCRBY', KEYS[5], 's:' .. hour, 1)
  redis.call('EXPIRE', KEYS[5], ARGV[7])
end
return reply({1, count, limit, base, quarantined, minute_cap, trusted})
