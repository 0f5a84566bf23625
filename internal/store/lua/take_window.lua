-- take_window is a fixed-window hit that counts only when it allows:
-- ARGV[1] more against a limit of ARGV[2], in a window of ARGV[3] ms that
-- starts at the first counted hit (PEXPIRE NX, as hitWindow). A denied hit
-- writes nothing. Returns {allowed, count, pttl}; pttl is -2 for a window
-- not started.
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local cost = tonumber(ARGV[1])
if count + cost > tonumber(ARGV[2]) then
  return {0, count, redis.call('PTTL', KEYS[1])}
end
count = redis.call('INCRBY', KEYS[1], cost)
redis.call('PEXPIRE', KEYS[1], ARGV[3], 'NX')
return {1, count, redis.call('PTTL', KEYS[1])}
