-- read_verification returns the record KEYS[1] of id ARGV[1] with its
-- status derived against the code KEYS[2] (lib/code.lua).
-- The lib/ parts below are copies of lua/lib/ (TestLuaLibraries holds
-- them to it; go test ./internal/store -run TestLuaLibraries -update
-- rewrites them).
-- begin lib/code.lua
-- lib/code.lua are the helpers of the code scripts. status_of reads a record
-- and derives expired: {s, c, u, e, a, x, o}, or false when there is none
-- (o, the service, is '' for the default service's).
local function status_of(vk, ck, id)
  local r = redis.call('HMGET', vk, 's', 'c', 'u', 'e', 'a', 'x', 'o')
  if not r[1] then return false end
  r[7] = r[7] or ''
  if r[1] == 'pending' and redis.call('HGET', ck, 'v') ~= id then r[1] = 'expired' end
  return r
end
-- end lib/code.lua
return status_of(KEYS[1], KEYS[2], ARGV[1])
