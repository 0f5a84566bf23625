-- wrk script: POST /otp/send, every request to a new Indian mobile number
-- (+9197... from wrk's first thread, +9198... from its second) from one
-- client address, as BenchmarkHandlerSend does; numbers start after the
-- first argument (a run's own range: a number sent again meets its cooldown).
-- The API key comes from $OTPGUARD_API_KEY.
--   wrk -t2 -c16 -d8s --latency -s docs/bench/send.lua http://127.0.0.1:18184 -- 10000000
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  n = tonumber(args[1] or "0")
  lead = 97 + id % 2
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. (os.getenv("OTPGUARD_API_KEY") or "")
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  n = n + 1
  local body = string.format('{"phone":"+91%d%08d","client_ip":"203.0.113.7"}', lead, n)
  return wrk.format(nil, "/otp/send", nil, body)
end
