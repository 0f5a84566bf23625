-- lib/base.lua is what every counter script starts with: the functions its
-- decisions call per take, as locals (a global, and math.floor's table,
-- is a hash lookup at every call; a local is not), and Redis's clock.
local call, pcall_call, floor, ceil, format, tonumber = redis.call, redis.pcall, math.floor, math.ceil, string.format, tonumber
-- now_us is Redis's clock (TIME) in µs. (Arithmetic converts TIME's two
-- strings, as "+ 0" converts the numbers a hot loop reads from ARGV: once
-- each, where tonumber converts twice, in lua_isnumber and again in
-- lua_tonumber.)
local function now_us()
  local t = call('TIME')
  return t[1] * 1000000 + t[2]
end
-- check_slice reports whether now (µs) falls in slice idx of slices of
-- slice ms (lib/limit.lua's time-slice hashes).
local function check_slice(now, slice, idx)
  return floor(now / (slice * 1000)) == idx
end
