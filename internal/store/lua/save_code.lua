-- save_code replaces the number's code (KEYS[1]) and creates its
-- record (KEYS[2]): a record still pending for the code it replaces is
-- canceled (superseded by the new one). ARGV: mac, code TTL ms, id, now
-- ms, max attempts, retention ms, record key prefix, expires ms. Returns
-- the guesses counted against the replaced code.
local prev = redis.call('HMGET', KEYS[1], 'a', 'v')
if prev[2] then
  local old = ARGV[7] .. prev[2]
  if redis.call('HGET', old, 's') == 'pending' then
    redis.call('HSET', old, 's', 'canceled', 'u', ARGV[4], 'r', ARGV[3])
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'a', 0, 'v', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 's', 'pending', 'c', ARGV[4], 'u', ARGV[4], 'e', ARGV[8], 'a', 0, 'x', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return tonumber(prev[1]) or 0
