-- end_verification deletes the code of a pending record (KEYS[1], id
-- ARGV[1]), its service's code of the number whose default code key is
-- KEYS[2] (lib/code.lua), and marks it ARGV[4] (canceled, or approved
-- without a code). Returns {ended (0/1), record...}, or false when there
-- is no record of the service ARGV[3] ('' the default service): another
-- service's record is none. ARGV: id, now ms, service, status.
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
local r = status_of(KEYS[1], KEYS[2], ARGV[1])
if not r or r[7] ~= ARGV[3] then return false end
if r[1] ~= 'pending' then return {0, unpack(r)} end
redis.call('DEL', code_key(KEYS[2], ARGV[3]))
redis.call('HSET', KEYS[1], 's', ARGV[4], 'u', ARGV[2])
r[1], r[3] = ARGV[4], ARGV[2]
return {1, unpack(r)}
