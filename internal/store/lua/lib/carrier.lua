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
