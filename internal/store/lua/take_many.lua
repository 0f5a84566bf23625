-- take_many decides several takes, in order, in one atomic step, on keys
-- of their own: lib_take's decide_takes. KEYS[i] is take i's key (a key
-- may repeat: a later take sees what the earlier ones spent). ARGV[1] is 1
-- for all or nothing, then decide_takes' five values per take. Returns
-- its five values per take: what take_bucket and take_window return.
--
-- The keys are theirs: a fixed window is a counter that starts at its
-- first counted hit (INCRBY, then PEXPIRE NX, as take_window), a bucket is
-- lib_bucket's TAT (TestTakeManyMatchesSingleScripts holds them together).
local now = now_us()
local state, order = {}, {}
local function open(i, kind, param)
  local key = KEYS[i]
  local s = state[key]
  if s then return s end
  if kind == 1 then
    s = {kind = 1, key = key, window = param, count = tonumber(redis.call('GET', key) or '0'), left = redis.call('PTTL', key)}
    s.count0 = s.count
  else
    local tat = load_tat(key, now)
    if tat < now then tat = now end
    s = {kind = 2, key = key, tat = tat, tat0 = tat}
  end
  state[key] = s
  order[#order + 1] = s
  return s
end
local out, write = decide_takes(ARGV[1] == '1', #KEYS, 2, 5, now, open)
if not write then return out end
for _, s in ipairs(order) do
  if s.kind == 1 then
    if s.count > s.count0 then
      redis.call('INCRBY', s.key, s.count - s.count0)
      redis.call('PEXPIRE', s.key, s.window, 'NX')
    end
  elseif s.tat ~= s.tat0 then
    store_tat(s.key, s.tat, now)
  end
end
return out
