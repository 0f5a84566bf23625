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
