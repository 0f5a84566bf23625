-- take_limits_many runs the take_limit and take_limits calls of several
-- requests, in order, as one script call (merge.go joins them from one
-- pipeline): Redis pays a script call's fixed cost (the lookup, the KEYS
-- and ARGV tables, the reply) once for all of them. Each call's group of
-- takes is decided as its own script would (lib_limit's take_one and
-- take_group, on one clock reading), with its own all or nothing and its
-- own slice check, and sees what the groups before it wrote: the same
-- decisions as the calls one after another.
--
-- KEYS are the calls' keys one after another. ARGV per call: its script
-- (1 take_limit, 2 take_limits), its number of keys, then its own ARGV.
-- A run of take_limit calls in a row that differ only in their field (the
-- checks of one policy: most of a busy pipeline) comes as one entry, 3:
-- the number of calls m, the seven values they share, then their m
-- fields; their keys are two per call as take_limit's. Redis then reads,
-- and Lua converts, the shared values once per run, not once per call. A
-- run of a fixed window's calls comes as 4, the same but for its keys: one
-- per call, cur (prev_of names prev).
-- Returns one reply per entry: per call, what its script returns, or an
-- error reply ({err = ...}) if it failed, which stops only that call (a
-- failed script call keeps what it wrote before the error, as this one
-- does); per run, its calls' five replies one after another in one flat
-- array (a failed call's error in its first place, zeros in the other
-- four), two per call for a fixed window's run (window_run), or
-- {-1, -1, now µs} once if its slice is not Redis's.
--
-- lib_take and lib_limit are built only by a call that needs them (libs,
-- scripts.go's lazyLibs): the common call, runs of fixed windows' hits in
-- cur, does not, and a script makes its functions anew at every call.
local function failed(r)
  if type(r) ~= 'table' or not r.err then r = {err = tostring(r)} end
  return r
end
-- prev_of names the hash of the slice before cur's: cur with its slice
-- index (idx, the digits before its hash tag "{shard}") less one, as
-- limits.go's appendLimitKeys names them.
local function prev_of(cur, idx)
  local tag = string.find(cur, '{%d+}$')
  local digits = format('%.0f', idx)
  return string.sub(cur, 1, tag - 1 - #digits) .. format('%.0f', idx - 1) .. string.sub(cur, tag)
end
-- window_run is take_run for a run of a fixed window's checks (fields
-- from ARGV[at]; ks keys per call from KEYS[k]: cur and prev, or cur
-- alone), each decided as take_limit would, replying two values per call:
-- its count, and (left ms + 2) * 4 + spent * 2 + allowed (left is -2 or
-- more). A hit on a window that runs in cur, allowed or counted, is one
-- HINCRBY and no call here: lib_limit's settle decides the rest, with
-- prev named by prev_of when the run sends cur alone.
local function window_run(k, ks, m, at, flags, limit, param, cost, slice, idx, now_ms)
  local out, delta, added = {}, format('%.0f', cost * slice), cost * slice
  local base, most, counts = idx * slice, 2^53 / slice - 1, flags >= 4
  for i = 0, m - 1 do
    local cur, field = KEYS[k + ks * i], ARGV[at + i]
    local n = pcall_call('HINCRBY', cur, field, delta)
    local count = type(n) == 'number' and n ~= added and floor(n / slice)
    local start = count and base + n - count * slice
    local ok, a, b, c, d
    if count and start + param > now_ms and count < most and (count <= limit or counts) then
      ok, a, b, c, d = true, count <= limit and 1 or 0, 1, count, start + param - now_ms
    else
      local prev = ks == 2 and KEYS[k + 2 * i + 1] or prev_of(cur, idx)
      ok, a, b, c, d = pcall(libs().settle, n, cur, prev, field, flags, limit, param, cost, slice, idx, now_ms, delta)
    end
    if ok then
      out[2 * i + 1], out[2 * i + 2] = c, (d + 2) * 4 + b * 2 + a
    else
      out[2 * i + 1], out[2 * i + 2] = failed(a), 0
    end
  end
  return out
end
-- take_run answers a run of m calls: KEYS from k, ks per call (2, or 1
-- for a fixed window's run that sends cur alone), ARGV from at (the seven
-- shared values, then the fields).
local function take_run(k, ks, m, at, now)
  local slice, idx = ARGV[at + 5] + 0, ARGV[at + 6] + 0
  if not check_slice(now, slice, idx) then return {-1, -1, now} end
  local kind, flags, limit = ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0
  local param, cost, now_ms = ARGV[at + 3] + 0, ARGV[at + 4] + 0, floor(now / 1000)
  if kind == 1 then return window_run(k, ks, m, at + 7, flags, limit, param, cost, slice, idx, now_ms) end
  if ks ~= 2 then return {err = 'a run with one key per call is a fixed window\'s'} end
  local out = {}
  for i = 0, m - 1 do
    local ok, a, b, c, d, e = pcall(libs().take_at, KEYS[k + 2 * i], KEYS[k + 2 * i + 1], ARGV[at + 7 + i],
      kind, flags, limit, param, cost, slice, idx, now, now_ms)
    if not ok then a, b, c, d, e = failed(a), 0, 0, 0, 0 end
    local j = 5 * i
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] = a, b, c, d, e
  end
  return out
end
local now = now_us()
local out, k, at = {}, 1, 1
local nargs = #ARGV
while at <= nargs do
  local script, n = ARGV[at], ARGV[at + 1] + 0
  if script == '3' or script == '4' then
    local ks = script == '3' and 2 or 1
    out[#out + 1] = take_run(k, ks, n, at + 2, now)
    at, k = at + 9 + n, k + ks * n
  else
    local ok, r
    if script == '1' then
      ok, r = pcall(libs().take_one, k, at + 2, now)
      at = at + 10
    else
      ok, r = pcall(libs().take_group, ARGV[at + 2] == '1', k, n / 2, at + 3, now)
      at = at + 3 + 4 * n
    end
    out[#out + 1] = ok and r or failed(r)
    k = k + n
  end
end
return out
