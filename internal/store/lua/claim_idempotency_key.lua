-- claim_idempotency_key claims KEYS[1] for a request with body digest
-- ARGV[1] and token ARGV[2] for ARGV[3] ms, or says what holds it:
-- {state} or {"done", answer}. One script: of any number of concurrent
-- requests, on any instances, exactly one claims a free key.
local r = redis.call('HMGET', KEYS[1], 's', 'b', 'r')
if not r[1] then
  redis.call('HSET', KEYS[1], 's', 'p', 'b', ARGV[1], 't', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if r[2] ~= ARGV[1] then return {'reused'} end
if r[1] == 'p' then return {'pending'} end
return {'done', r[3]}
