-- lock_code marks the record ARGV[1] max_attempts_reached, if it is
-- still the number's live code (KEYS[1]) and pending. The code stays, so
-- that later guesses are refused until it expires. ARGV: id, record key
-- prefix, now ms.
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
local vk = ARGV[2] .. ARGV[1]
if redis.call('HGET', vk, 's') ~= 'pending' then return 0 end
redis.call('HSET', vk, 's', 'max_attempts_reached', 'u', ARGV[3])
return 1
