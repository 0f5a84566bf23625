-- count_window is a fixed-window hit that counts whether it allows or not
-- (an Envoy rule's window, guard.Take.Independent): ARGV[1] more, in a
-- window of ARGV[2] ms that starts at the first hit (PEXPIRE NX, as
-- hitWindow). It is hitWindow's MULTI as one command, which concurrent
-- decisions share a write with (Coalescer), and the counterpart of
-- envoyproxy/ratelimit's pipelined INCRBY + EXPIRE, atomic. Returns
-- {count, pttl}.
local count = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'NX')
return {count, redis.call('PTTL', KEYS[1])}
