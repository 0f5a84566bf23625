-- count_conversion counts one event of kind ARGV[1] at ARGV[4] (unix
-- seconds) in the subject KEYS[1]'s sliding window of ARGV[2] seconds in
-- buckets of ARGV[3] seconds, sends maturing after ARGV[5] buckets, and
-- returns the window's {matured sends, verifies} (lib_conversion.lua).
local s, v = count_event(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
return {s, v}
