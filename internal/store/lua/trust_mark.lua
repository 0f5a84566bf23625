-- Remembers one trusted number (guard/trust.go): sets its mark KEYS[1]
-- (a keyed hash of the number, never the number) for ARGV[1] milliseconds,
-- renewing it. With ARGV[2] = 1 a verify is being remembered: when the
-- mark already counted (the number was trusted), or when ARGV[5] = 1 (its
-- code was sent in the trusted tier: the app's account flag, the number
-- perhaps not marked yet), the verify is the trusted tier's credit,
-- counted in its country's hash KEYS[2] under "v:<ARGV[3]>" (the hour),
-- the velocity rule's layout, whose TTL is ARGV[4] seconds. KEYS[1] to
-- KEYS[4] share the country's hash tag.
--
-- Held marks (ARGV[7] > 0: the hold in seconds; ARGV[6] is now, unix
-- seconds of the service's clock). A mark is a time (lib/mark.lua): a
-- new mark earned in an hour whose new numbers ran above their country's
-- normal counts only from now + the hold. The hour is abnormal when the
-- untrusted sends of the hour ("s:<ARGV[3]>" of KEYS[3], the velocity
-- rule's hash of new numbers) exceed the hour's line pro rata, or those
-- of the hour before exceed its whole line. The line is
-- max(ARGV[8], floor(ARGV[9] x "b:<hour>")): the floor, or a multiple of
-- the country's baseline for the hour (guard/pace.go: growth per day, so
-- one hour above it is more than a day's growth). Pro rata: at the
-- verify's minute the hour has had only that share of its line, at least
-- the floor, so a farm that verifies its own codes is judged from its
-- first minutes, not once it has filled a quiet hour's whole line. Real
-- users' hours send about their baseline / their conversion, spread over
-- the hour; a ring that verifies its own codes goes past it within
-- minutes, and the hour before keeps the hours after it judged while it
-- runs. An hour without "b:<hour>" counted no new number yet and is not
-- judged.
-- Per carrier (guard/pace.go), when ARGV[10] > 0 (the carrier floor
-- share): KEYS[4] is the mark's carrier's counts within the country (the
-- velocity rule's carrier hash, same hash tag), and while the carriers
-- split the country (its share, "p:<hour>" or the hour before's cached by
-- the carrier's last send, below 1000) the hour is judged by the
-- carrier's own untrusted sends against its part of each line,
-- carrier_room(share, line, ARGV[10], ARGV[8]): a ring on one carrier's
-- ranges makes that carrier's hour abnormal, not the other carriers'
-- real users'. A ring spread over every carrier makes every carrier's
-- hour abnormal, and the carriers' lines add up to the country's but for
-- their floors. Without a share below 1000 (too thin a history, one
-- carrier, or none sent yet) the country judges, as without the split.
-- A mark that exists keeps its time (a trusted number stays trusted, a
-- held one is not held longer); a code sent in the trusted tier (ARGV[5],
-- the app's word) is never held and lifts a hold. A held mark lives the
-- hold longer, so that it still has ARGV[1] to live once it counts.
-- Returns {credited, held, by_carrier}: 1 when the verify was credited to
-- the trusted tier; 1 when the mark was written held; 1 when its hour was
-- judged by its carrier's counts.
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
local now = tonumber(ARGV[6])
local hold = tonumber(ARGV[7]) or 0
local hour = tonumber(ARGV[3])
local start = mark_start(KEYS[1])
local trusted_before = start ~= nil and start <= now
local counts_from, held, by_carrier = 1, 0, 0
if ARGV[5] == '1' then
  counts_from = 1
elseif start then
  counts_from = start
elseif hold > 0 then
  local f = redis.call('HMGET', KEYS[3], 's:' .. hour, 's:' .. (hour - 1), 'b:' .. hour)
  local base = tonumber(f[3])
  if base then
    local floor_sends = tonumber(ARGV[8])
    local normal_limit = tonumber(ARGV[9]) * base
    local hour_gone = math.min(math.max(now - hour * 3600, 0), 3600) / 3600
    local line_now = math.max(floor_sends, math.floor(normal_limit * hour_gone + 1e-9))
    local line_whole = math.max(floor_sends, math.floor(normal_limit + 1e-9))
    local sends, sends_before = tonumber(f[1]) or 0, tonumber(f[2]) or 0
    local carrier_floor_share = tonumber(ARGV[10]) or 0
    if carrier_floor_share > 0 then
      local c = redis.call('HMGET', KEYS[4], 's:' .. hour, 's:' .. (hour - 1), 'p:' .. hour, 'p:' .. (hour - 1))
      local share = tonumber(c[3]) or tonumber(c[4])
      if share and share < 1000 then
        by_carrier = 1
        sends, sends_before = tonumber(c[1]) or 0, tonumber(c[2]) or 0
        line_now = carrier_room(share, line_now, carrier_floor_share, floor_sends)
        line_whole = carrier_room(share, line_whole, carrier_floor_share, floor_sends)
      end
    end
    if sends > line_now or sends_before > line_whole then
      counts_from, held = now + hold, 1
    end
  end
end
local ttl = tonumber(ARGV[1])
if counts_from > now then ttl = ttl + (counts_from - now) * 1000 end
redis.call('SET', KEYS[1], counts_from, 'PX', ttl)
if ARGV[2] ~= '1' or (not trusted_before and ARGV[5] ~= '1') then
  return {0, held, by_carrier}
end
redis.call('HINCRBY', KEYS[2], 'v:' .. hour, 1)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {1, held, by_carrier}
