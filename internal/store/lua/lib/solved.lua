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
