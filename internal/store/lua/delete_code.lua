-- delete_code deletes the number's code (KEYS[1]) and the record of
-- its verification: a code whose SMS never left was never handed to
-- anyone, and neither was its id. ARGV: record key prefix.
local id = redis.call('HGET', KEYS[1], 'v')
if id then redis.call('DEL', ARGV[1] .. id) end
return redis.call('DEL', KEYS[1])
