-- consume_code deletes the code (KEYS[1]) only if it is still the one
-- the caller matched (ARGV[1]) and its record is pending, and approves the
-- record: of two concurrent correct guesses, or a right guess and a
-- cancel, one wins. Returns 1 consumed, 0 gone or replaced, 2 the record
-- is no longer pending (a concurrent wrong guess locked it). ARGV: mac,
-- record key prefix, now ms.
local f = redis.call('HMGET', KEYS[1], 'm', 'v')
if f[1] ~= ARGV[1] then return 0 end
local vk = false
if f[2] then
  vk = ARGV[2] .. f[2]
  local s = redis.call('HGET', vk, 's')
  if s and s ~= 'pending' then return 2 end
end
redis.call('DEL', KEYS[1])
if vk and redis.call('EXISTS', vk) == 1 then
  redis.call('HSET', vk, 's', 'approved', 'u', ARGV[3])
end
return 1
