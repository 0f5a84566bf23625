-- refund_bucket gives ARGV[2] tokens back to a bucket refilling one token
-- every ARGV[1] microseconds. A missing key is already full: nothing to do.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local now = now_us()
local tat = load_tat(KEYS[1], now)
store_tat(KEYS[1], math.floor(tat - tonumber(ARGV[2]) * tonumber(ARGV[1]) + 0.5), now)
return 1
