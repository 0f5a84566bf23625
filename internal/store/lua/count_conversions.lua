-- count_conversions counts a run of the conversion watch's events in
-- order, each as count_conversion does (lib_conversion.lua), in one
-- script call instead of one per event and subject: the window ARGV[1]
-- (seconds), bucket ARGV[2] (seconds) and delay ARGV[3] (buckets) are
-- shared; then each count is three values, its kind, its time (unix
-- seconds) and the index of its subject in KEYS. Returns each count's
-- {matured sends, verifies}, flat, in order. Single Redis only: the
-- subjects are in different hash slots.
local window, bucket, delay = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV, 3 do
  local s, v = count_event(KEYS[tonumber(ARGV[i + 2])], ARGV[i], window, bucket, tonumber(ARGV[i + 1]), delay)
  out[#out + 1] = s
  out[#out + 1] = v
end
return out
