-- refund_volume takes one send back off hour ARGV[1] and minute
-- ARGV[2], never below zero and never creating the key or a field.
-- KEYS[2], when given, is the send's carrier's counts (guard/carrier.go;
-- same hash tag): its hour's send goes back too.
for i, f in ipairs({'s:' .. ARGV[1], 'm:' .. ARGV[2]}) do
  local v = tonumber(redis.call('HGET', KEYS[1], f))
  if v and v > 0 then redis.call('HINCRBY', KEYS[1], f, -1) end
end
if KEYS[2] then
  local v = tonumber(redis.call('HGET', KEYS[2], 's:' .. ARGV[1]))
  if v and v > 0 then redis.call('HINCRBY', KEYS[2], 's:' .. ARGV[1], -1) end
end
return 1
