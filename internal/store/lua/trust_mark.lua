-- Remembers one trusted number (guard/trust.go): sets its mark KEYS[1]
-- (a keyed hash of the number, never the number) for ARGV[1] milliseconds,
-- renewing it. With ARGV[2] = 1 a verify is being remembered: when the
-- mark was already set (the number was trusted), or when ARGV[5] = 1 (its
-- code was sent in the trusted tier: the app's account flag, the number
-- perhaps not marked yet), the verify is the trusted tier's credit,
-- counted in its country's hash KEYS[2] under "v:<ARGV[3]>" (the hour),
-- the velocity rule's layout, whose TTL is ARGV[4] seconds. KEYS[1] and
-- KEYS[2] share the country's hash tag. Returns 1 when the verify was
-- credited to the trusted tier, else 0.
local was = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
if ARGV[2] ~= '1' or (was == 0 and ARGV[5] ~= '1') then
  return 0
end
redis.call('HINCRBY', KEYS[2], 'v:' .. ARGV[3], 1)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
