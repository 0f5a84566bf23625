-- end_block removes ARGV[1]'s block if its reason is ARGV[2].
if redis.call('HGET', KEYS[3], 'reason') ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
