-- refund_volume takes one send back off hour ARGV[1] and minute
-- ARGV[2], never below zero and never creating the key or a field.
for i, f in ipairs({'s:' .. ARGV[1], 'm:' .. ARGV[2]}) do
  local v = tonumber(redis.call('HGET', KEYS[1], f))
  if v and v > 0 then redis.call('HINCRBY', KEYS[1], f, -1) end
end
return 1
