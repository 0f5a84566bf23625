-- wrk script: POST /limits/check, one check per request (or a batch: the
-- second argument), keys round-robin over 1,000 per thread, as otpguard-load
-- does. The API key comes from $OTPGUARD_API_KEY.
--   wrk -t2 -c64 -d8s --latency -s docs/bench/check.lua http://127.0.0.1:18181 -- api 1
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  policy = args[1] or "api"
  batch = tonumber(args[2] or "1")
  n = 0
  prefix = string.format("wrk%d-%d:", os.time() % 100000, id)
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. (os.getenv("OTPGUARD_API_KEY") or "")
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local body
  if batch == 1 then
    body = string.format('{"policy":"%s","key":"%s%d"}', policy, prefix, n % 1000)
    n = n + 1
  else
    local checks = {}
    for j = 1, batch do
      checks[j] = string.format('{"policy":"%s","key":"%s%d"}', policy, prefix, n % 1000)
      n = n + 1
    end
    body = '{"checks":[' .. table.concat(checks, ",") .. ']}'
  end
  return wrk.format(nil, "/limits/check", nil, body)
end
