-- guess_code counts one guess against a live code (KEYS[1]) and
-- returns {attempts, mac, pttl, id}; nil when there is no code. Counting
-- before the caller compares is what bounds the guesses: a guess that is
-- never counted cannot exist. The guess is counted on the pending record
-- too (up to its max). A guess past the max is refused by the caller
-- without comparing, and changes no status: the wrong guess that used the
-- last attempt locks the record (lock_code), while a right guess
-- counted before it may still approve it. ARGV: record key prefix, now
-- ms, the guessing service ('' the default service), the verification
-- guessed for ('' any). A code of another service, or of another
-- verification, is no code for this guess: nil, and nothing counted.
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local owner = redis.call('HMGET', KEYS[1], 'o', 'v')
if (owner[1] or '') ~= ARGV[3] then return false end
if ARGV[4] ~= '' and owner[2] ~= ARGV[4] then return false end
local a = redis.call('HINCRBY', KEYS[1], 'a', 1)
local f = redis.call('HMGET', KEYS[1], 'm', 'v')
local id = f[2] or ''
if id ~= '' then
  local vk = ARGV[1] .. id
  local r = redis.call('HMGET', vk, 's', 'x')
  if r[1] == 'pending' and a <= tonumber(r[2]) then
    redis.call('HSET', vk, 'a', a, 'u', ARGV[2])
  end
end
return {a, f[1], redis.call('PTTL', KEYS[1]), id}
