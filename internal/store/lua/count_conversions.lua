-- count_conversions counts a run of the conversion watch's events in
-- order, each as count_conversion does (lib/conversion.lua), in one
-- script call instead of one per event and subject: the window ARGV[1]
-- (seconds), bucket ARGV[2] (seconds) and delay ARGV[3] (buckets) are
-- shared; then each count is three values, its kind, its time (unix
-- seconds) and the index of its subject in KEYS. Returns each count's
-- {matured sends, verifies}, flat, in order. Single Redis only: the
-- subjects are in different hash slots.
-- The lib/ parts below are copies of lua/lib/ (TestLuaLibraries holds
-- them to it; go test ./internal/store -run TestLuaLibraries -update
-- rewrites them).
-- begin lib/conversion.lua
-- lib/conversion.lua counts the conversion watch's events (count_conversion,
-- count_conversions).
--
-- A subject is one hash (key) of per-minute buckets: field "<kind>:<minute>"
-- (kind s or v, minute = at / bucket, the service's clock) holds the events
-- of that minute. The window is the current minute and the window/bucket -
-- 1 before it; its sends count only from minutes at least delay buckets
-- old (conversion.delay: younger codes may still be verified), its
-- verifies all. Older fields are deleted as they are met, so the hash holds
-- at most two fields per minute of the window and the delay, and the key
-- expires once the subject goes quiet. count_event counts one event of kind
-- at at and returns the window's matured sends and verifies: within one
-- script, the count and the read are one atomic step.
local function count_event(key, kind, window, bucket, at, delay)
  local cur = math.floor(at / bucket)
  local first = cur - math.floor(window / bucket) + 1
  redis.call('HINCRBY', key, kind .. ':' .. cur, 1)
  local all = redis.call('HGETALL', key)
  local s, v = 0, 0
  local old = {}
  for i = 1, #all, 2 do
    local k, b = string.match(all[i], '^(%a):(%d+)$')
    b = tonumber(b)
    if not b or b < first - delay then
      old[#old + 1] = all[i]
    elseif k == 's' and b <= cur - delay then
      s = s + tonumber(all[i + 1])
    elseif k == 'v' and b >= first then
      v = v + tonumber(all[i + 1])
    end
  end
  if #old > 0 then redis.call('HDEL', key, unpack(old)) end
  redis.call('EXPIRE', key, window + (delay + 1) * bucket)
  return s, v
end
-- end lib/conversion.lua
local window, bucket, delay = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV, 3 do
  local s, v = count_event(KEYS[tonumber(ARGV[i + 2])], ARGV[i], window, bucket, tonumber(ARGV[i + 1]), delay)
  out[#out + 1] = s
  out[#out + 1] = v
end
return out
