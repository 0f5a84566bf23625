-- refund_sliding takes ARGV[1] back off a sliding window's slice ARGV[2]
-- (the hit's slice index, its Result's WindowID; lib/sliding.lua), never
-- below zero and never creating a key or a slice: a slice that left the
-- window, or a key that expired, is not given back to, so a refund never
-- frees room in a span its hit did not count in. A slice brought to zero
-- is deleted. HINCRBY keeps the key's TTL. Returns what it gave back.
local hits = tonumber(redis.call('HGET', KEYS[1], ARGV[2]))
if not hits or hits <= 0 then return 0 end
local back = math.min(hits, tonumber(ARGV[1]))
if back >= hits then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  redis.call('HINCRBY', KEYS[1], ARGV[2], -back)
end
return back
