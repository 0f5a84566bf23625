-- finish_idempotency_key stores the answer ARGV[2] for ARGV[3] ms, if the
-- claim KEYS[1] is still the token ARGV[1]'s (it may have expired and been
-- claimed again). Returns 1 stored, 0 not.
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 'r', ARGV[2])
redis.call('HDEL', KEYS[1], 't')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
