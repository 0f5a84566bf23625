-- list_blocks prunes ended blocks (at most 1000 per call) and returns
-- the number of live ones followed by the ARGV[1] most recently begun
-- (every one when ARGV[1] is 0 or more than there are).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
local n = tonumber(ARGV[1])
local phones = redis.call('ZREVRANGE', KEYS[2], 0, n - 1)
table.insert(phones, 1, redis.call('ZCARD', KEYS[2]))
return phones
