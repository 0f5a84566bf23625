-- read_verification returns the record KEYS[1] of id ARGV[1] with its
-- status derived against its service's code of the number whose default
-- code key is KEYS[2] (lib/code.lua).
-- The lib/ parts below are copies of lua/lib/ (TestLuaLibraries holds
-- them to it; go test ./internal/store -run TestLuaLibraries -update
-- rewrites them).
-- begin lib/code.lua
-- lib/code.lua are the helpers of the code scripts. Each service keeps its
-- own live code per number: code_key(base, service) is the number's code
-- key of service, base (the default service's key, unchanged since
-- before services) for the default service ('') and base .. ':' .. its
-- SID for another, in base's hash slot. status_of reads a record and
-- derives expired against its own service's code: {s, c, u, e, a, x, o,
-- h}, or false when there is none (o, the service, is '' for the default
-- service's; h, the channel the code went by, '' for SMS).
local function code_key(base, service)
  if service == '' then return base end
  return base .. ':' .. service
end
local function status_of(vk, base, id)
  local r = redis.call('HMGET', vk, 's', 'c', 'u', 'e', 'a', 'x', 'o', 'h')
  if not r[1] then return false end
  r[7], r[8] = r[7] or '', r[8] or ''
  if r[1] == 'pending' and redis.call('HGET', code_key(base, r[7]), 'v') ~= id then r[1] = 'expired' end
  return r
end
-- end lib/code.lua
return status_of(KEYS[1], KEYS[2], ARGV[1])
