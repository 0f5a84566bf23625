-- lib/code.lua are the helpers of the code scripts. status_of reads a record
-- and derives expired: {s, c, u, e, a, x}, or false when there is none.
local function status_of(vk, ck, id)
  local r = redis.call('HMGET', vk, 's', 'c', 'u', 'e', 'a', 'x')
  if not r[1] then return false end
  if r[1] == 'pending' and redis.call('HGET', ck, 'v') ~= id then r[1] = 'expired' end
  return r
end
