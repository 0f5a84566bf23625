#!/bin/bash
# usage: docs/bench/rate.sh <label>: /limits/check at a fixed 5,400/s for 8 s (SRC as in saturation.sh;
# SERVER_ENV='GOGC=100 ...' sets the server's environment)
cd "$(dirname "$0")/../.." && mkdir -p /tmp/bench && go build -o /tmp/bench/load ./cmd/otpguard-load || exit 1
label=$1; port=18182
(cd ${SRC:-.} && go build -o /tmp/bench/otpguard-$label ./cmd/otpguard) || exit 1
env ${SERVER_ENV:-X=1} OTPGUARD_ADDR=127.0.0.1:$port OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_SMS=console OTPGUARD_REDIS_PREFIX="bench$RANDOM:" \
  OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
  OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_CONFIG=docs/bench/policies.yaml OTPGUARD_LOG_LEVEL=warn /tmp/bench/otpguard-$label > /dev/null 2>&1 &
srv=$!
for i in $(seq 50); do curl -s 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
OTPGUARD_API_KEY=bench-key-0123456789abcdef /tmp/bench/load -url http://127.0.0.1:$port -policy api -rate 5400 -duration 8s 2>&1 | grep -E "^requests|latency|server"
kill $srv; wait $srv 2>/dev/null
