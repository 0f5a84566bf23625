-- take_bucket takes ARGV[3] tokens from a bucket of capacity ARGV[1] that
-- refills one token every ARGV[2] microseconds (lib_bucket.lua keeps the
-- bucket). It spends only when it allows. Returns {allowed, remaining,
-- retry_after_us, reset_after_us}.
local capacity = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = now_us()
local tat = load_tat(KEYS[1], now)
if tat < now then tat = now end
local burst = capacity * interval
local new_tat = math.floor(tat + cost * interval + 0.5)
if new_tat - now > burst + 0.5 then
  local remaining = tokens_left(burst, tat - now, interval)
  return {0, remaining, math.ceil(new_tat - now - burst), math.ceil(tat - now)}
end
if cost > 0 then
  store_tat(KEYS[1], new_tat, now)
end
local remaining = tokens_left(burst, new_tat - now, interval)
return {1, remaining, 0, math.ceil(new_tat - now)}
