-- save_code replaces the service's code of the number (KEYS[1]: each
-- service keeps its own, lib/code.lua) and creates its record (KEYS[2]):
-- a record still pending for the code it replaces, the same service's, is
-- canceled (superseded by the new one); other services' codes stay. ARGV: mac, code TTL ms, id, now
-- ms, max attempts, retention ms, record key prefix, expires ms, the
-- service that owns the code ('' the default service: no field), the
-- number (below), the channel the code goes by ('' or 'sms': no field).
-- Returns the guesses counted against the replaced code.
--
-- On a single Redis it also maps the id to the number: KEYS[3], the id's
-- key, set to ARGV[10] (the number) for the record's retention, first, as
-- the MULTI that held this script and the SET did. The id's key is in
-- another hash slot, which only a single node allows; one script call
-- instead of a MULTI is one command the Coalescer can carry with other
-- requests' (store/coalesce.go). On Redis Cluster the id's key lives on
-- another master: the store sets it on its own, after (store/verification.go).
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[10], 'PX', ARGV[6])
end
local prev = redis.call('HMGET', KEYS[1], 'a', 'v')
if prev[2] then
  local old = ARGV[7] .. prev[2]
  if redis.call('HGET', old, 's') == 'pending' then
    redis.call('HSET', old, 's', 'canceled', 'u', ARGV[4], 'r', ARGV[3])
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'a', 0, 'v', ARGV[3])
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'o', ARGV[9])
  redis.call('HSET', KEYS[2], 'o', ARGV[9])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 's', 'pending', 'c', ARGV[4], 'u', ARGV[4], 'e', ARGV[8], 'a', 0, 'x', ARGV[5])
if ARGV[11] and ARGV[11] ~= '' and ARGV[11] ~= 'sms' then
  redis.call('HSET', KEYS[2], 'h', ARGV[11])
end
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return tonumber(prev[1]) or 0
