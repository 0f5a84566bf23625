-- wrk script: envoyproxy/ratelimit's POST /json, one descriptor per request, keys round-robin over
-- 1,000 per thread as check.lua does for otpguard (docs/bench/peers.sh).
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  domain = args[1] or "wide"
  n = 0
  prefix = string.format("wrk%d-%d:", os.time() % 100000, id)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local body = string.format('{"domain":"%s","descriptors":[{"entries":[{"key":"user","value":"%s%d"}]}]}',
    domain, prefix, n % 1000)
  n = n + 1
  return wrk.format(nil, "/json", nil, body)
end
