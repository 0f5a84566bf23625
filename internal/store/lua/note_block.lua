-- note_block records a block of ARGV[1] ending at ARGV[2] (unix ms)
-- with reason ARGV[3], count ARGV[4] and country ARGV[5]. A block already
-- noted that lasts longer stands (a cooldown must not hide an hour-long
-- limit); a block continuing keeps the time it began. One script, so that
-- two instances noting the same number cannot interleave.
--
-- The clock is Redis TIME, as in the limit scripts. Returns 1 when noted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untl = tonumber(ARGV[2])
if untl <= now then return 0 end
local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
local since = now
if cur and cur > now then
  if cur > untl then return 0 end
  since = tonumber(redis.call('HGET', KEYS[3], 'since')) or now
end
redis.call('HSET', KEYS[3], 'reason', ARGV[3], 'count', ARGV[4], 'until', ARGV[2], 'country', ARGV[5], 'since', since)
redis.call('PEXPIREAT', KEYS[3], untl)
redis.call('ZADD', KEYS[1], untl, ARGV[1])
redis.call('ZADD', KEYS[2], since, ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[2], unpack(gone))
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local ttl = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
