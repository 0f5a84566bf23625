-- refund_window takes ARGV[1] back off a fixed-window counter, never
-- below zero and never creating a key: a DECRBY on a key that just expired
-- would leave a counter without a TTL. DECRBY keeps the key's TTL.
local v = tonumber(redis.call('GET', KEYS[1]))
if not v or v <= 0 then return 0 end
return redis.call('DECRBY', KEYS[1], math.min(v, tonumber(ARGV[1])))
