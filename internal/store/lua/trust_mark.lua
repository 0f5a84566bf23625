-- Remembers one trusted number (guard/trust.go): sets its mark KEYS[1]
-- (a keyed hash of the number, never the number) for ARGV[1] milliseconds,
-- renewing it. With ARGV[2] = 1 a verify is being remembered: when the
-- mark already counted (the number was trusted), or when ARGV[5] = 1 (its
-- code was sent in the trusted tier: the app's account flag, the number
-- perhaps not marked yet), the verify is the trusted tier's credit,
-- counted in its country's hash KEYS[2] under "v:<ARGV[3]>" (the hour),
-- the velocity rule's layout, whose TTL is ARGV[4] seconds. KEYS[1],
-- KEYS[2] and KEYS[3] share the country's hash tag.
--
-- Held marks (ARGV[7] > 0: the hold in seconds; ARGV[6] is now, unix
-- seconds of the service's clock). A mark is a time (lib/mark.lua): a
-- new mark earned in an hour whose new numbers ran above their country's
-- normal counts only from now + the hold. The hour is abnormal when the
-- untrusted sends of the hour ("s:<ARGV[3]>" of KEYS[3], the velocity
-- rule's hash of new numbers) exceed the hour's line pro rata, or those
-- of the hour before exceed its whole line. The line is
-- max(ARGV[8], floor(ARGV[9] x "b:<hour>")): the floor, or a multiple of
-- the country's baseline for the hour (guard/pace.go: growth per day, so
-- one hour above it is more than a day's growth). Pro rata: at the
-- verify's minute the hour has had only that share of its line, at least
-- the floor, so a farm that verifies its own codes is judged from its
-- first minutes, not once it has filled a quiet hour's whole line. Real
-- users' hours send about their baseline / their conversion, spread over
-- the hour; a ring that verifies its own codes goes past it within
-- minutes, and the hour before keeps the hours after it judged while it
-- runs. An hour without "b:<hour>" counted no new number yet and is not
-- judged.
-- A mark that exists keeps its time (a trusted number stays trusted, a
-- held one is not held longer); a code sent in the trusted tier (ARGV[5],
-- the app's word) is never held and lifts a hold. A held mark lives the
-- hold longer, so that it still has ARGV[1] to live once it counts.
-- Returns {credited, held}: 1 when the verify was credited to the trusted
-- tier; 1 when the mark was written held.
-- begin lib/mark.lua
-- lib/mark.lua reads a trusted number's mark (guard/trust.go) the one way
-- every script that reads it must (take_volume, take_automatic,
-- trust_mark, read_trust_mark). A mark's value is the time (unix seconds
-- of the service's clock) from which it counts: "1" for a mark that counts
-- at once (a verify in a normal hour, an import, an account's number), a
-- later time for a mark earned in an hour whose new numbers ran above
-- their country's normal (held: its number verifies as any other, but is
-- not trusted until then). mark_start is that time, or nil without a mark;
-- mark_counts says whether the mark trusts its number at now.
local function mark_start(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  return tonumber(v) or 0
end
local function mark_counts(key, now)
  local start = mark_start(key)
  return start ~= nil and start <= now
end
-- end lib/mark.lua
local now = tonumber(ARGV[6])
local hold = tonumber(ARGV[7]) or 0
local hour = tonumber(ARGV[3])
local start = mark_start(KEYS[1])
local trusted_before = start ~= nil and start <= now
local counts_from, held = 1, 0
if ARGV[5] == '1' then
  counts_from = 1
elseif start then
  counts_from = start
elseif hold > 0 then
  local f = redis.call('HMGET', KEYS[3], 's:' .. hour, 's:' .. (hour - 1), 'b:' .. hour)
  local base = tonumber(f[3])
  if base then
    local floor_sends = tonumber(ARGV[8])
    local normal_limit = tonumber(ARGV[9]) * base
    local hour_gone = math.min(math.max(now - hour * 3600, 0), 3600) / 3600
    local line_now = math.max(floor_sends, math.floor(normal_limit * hour_gone + 1e-9))
    local line_whole = math.max(floor_sends, math.floor(normal_limit + 1e-9))
    if (tonumber(f[1]) or 0) > line_now or (tonumber(f[2]) or 0) > line_whole then
      counts_from, held = now + hold, 1
    end
  end
end
local ttl = tonumber(ARGV[1])
if counts_from > now then ttl = ttl + (counts_from - now) * 1000 end
redis.call('SET', KEYS[1], counts_from, 'PX', ttl)
if ARGV[2] ~= '1' or (not trusted_before and ARGV[5] ~= '1') then
  return {0, held}
end
redis.call('HINCRBY', KEYS[2], 'v:' .. hour, 1)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {1, held}
