-- refund_window takes ARGV[1] back off a fixed-window counter, never
-- below zero and never creating a key: a DECRBY on a key that just expired
-- would leave a counter without a TTL. DECRBY keeps the key's TTL.
--
-- ARGV[2], when not 0, is the window the hit counted in: its end on
-- Redis's clock (PEXPIRETIME) as the hit's MULTI read it. PEXPIRE NX never
-- moves a window's end, and a window started after it ended ends later,
-- so a key whose end differs is another window: the hit's has ended (the
-- key expired, or was deleted to unblock the number) and this one counts
-- other requests' hits, which a refund must not take away. One script:
-- the read and the DECRBY see the same window, whatever other instances
-- do in between.
local count = tonumber(redis.call('GET', KEYS[1]))
if not count or count <= 0 then return 0 end
local window_end = tonumber(ARGV[2]) or 0
if window_end ~= 0 and redis.call('PEXPIRETIME', KEYS[1]) ~= window_end then return 0 end
return redis.call('DECRBY', KEYS[1], math.min(count, tonumber(ARGV[1])))
