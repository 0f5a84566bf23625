-- sync_bucket adds ARGV[3] tokens that an instance already spent on its
-- own (sync mode) to a bucket of capacity ARGV[1] refilling one token every
-- ARGV[2] microseconds, and returns {remaining, reset_after_us}. Unlike
-- take_bucket it never refuses: the tokens are gone. A bucket
-- overspent by the instances goes below zero (remaining < 0) and pays the
-- debt back out of its refill, which is how sync mode corrects itself.
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local now = now_us()
local tat = load_tat(KEYS[1], now)
if tat < now then tat = now end
tat = math.floor(tat + tonumber(ARGV[3]) * interval + 0.5)
store_tat(KEYS[1], tat, now)
return {tokens_left(capacity * interval, tat - now, interval), math.ceil(tat - now)}
