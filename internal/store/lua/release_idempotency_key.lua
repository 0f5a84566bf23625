-- release_idempotency_key frees the claim KEYS[1] of token ARGV[1]: the
-- request's answer is not kept (a 5xx, a 429), so a retry runs afresh.
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
