-- beat records one instance as alive and counts the live ones,
-- in one atomic step on Redis's clock (one clock for every instance, so a
-- skewed host neither ages nor revives the others):
--
--	ZRANGEBYSCORE     who was last seen StaleAfter ago or earlier: gone
--	ZREMRANGEBYSCORE  forgets them
--	ZADD     the instance, scored by now (ms); 1 when it was not in the set
--	PEXPIRE  the set, so it dies with the last instance: no key without TTL
--	ZCARD    the live count, this instance included
--
-- An instance that stops cleanly takes itself out (ZREM, Run); one that is
-- forgotten here stopped beating without leaving (a crash, a SIGKILL, a
-- partition), and exactly one beat, the one that forgets it, names it.
-- ZADD's 1 tells an instance that had beaten before that the set lost it:
-- Redis came back empty, or it was away longer than StaleAfter.
--
-- KEYS[1] the set; ARGV[1] instance id; ARGV[2] StaleAfter in ms.
-- Returns {live count, added (0/1), forgotten ids (at most 100)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - stale, 'LIMIT', 0, 100)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - stale)
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], stale * 2)
return {redis.call('ZCARD', KEYS[1]), added, gone}
