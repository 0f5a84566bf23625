-- read_code reads the number's live code of one service (KEYS[1], its
-- code key: lib/code.lua; KEYS[2] the default service's, the base of
-- every service's key) without counting a
-- guess, for the ops desk's number search (guard.OTP.Inspect): the
-- guesses counted against it (its "a", which guess_code counts before
-- the caller compares, past the max too), its verification's max and
-- status (lib/code.lua: "max_attempts_reached" once a wrong guess used the
-- last attempt, lock_code), and the code's PTTL (ms). One script, so the
-- code and its record are read as one. ARGV[1] is the record key prefix.
-- Returns {guesses, max, status, pttl}; false when there is no code (max 0
-- and status "" when its record is gone).
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
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local code = redis.call('HMGET', KEYS[1], 'a', 'v')
local guesses = tonumber(code[1]) or 0
local id = code[2] or ''
local record = id ~= '' and status_of(ARGV[1] .. id, KEYS[2], id)
local pttl = redis.call('PTTL', KEYS[1])
if not record then return {guesses, 0, '', pttl} end
return {guesses, tonumber(record[6]) or 0, record[1], pttl}
