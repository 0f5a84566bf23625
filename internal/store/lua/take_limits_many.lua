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
-- Returns one reply per call: what its script returns, or an error reply
-- ({err = ...}) if it failed, which stops only that call (a failed script
-- call keeps what it wrote before the error, as this one does).
local now = now_us()
local out, k, at = {}, 1, 1
while at <= #ARGV do
  local script, nkeys = ARGV[at], tonumber(ARGV[at + 1])
  local ok, r
  if script == '1' then
    ok, r = pcall(take_one, k, at + 2, now)
    at = at + 10
  else
    ok, r = pcall(take_group, ARGV[at + 2] == '1', k, nkeys / 2, at + 3, now)
    at = at + 3 + 4 * nkeys
  end
  if not ok then
    if type(r) ~= 'table' or not r.err then r = {err = tostring(r)} end
  end
  out[#out + 1] = r
  k = k + nkeys
end
return out
