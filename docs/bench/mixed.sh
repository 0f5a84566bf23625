#!/bin/bash
# usage: docs/bench/mixed.sh <label> [seconds]: 3 otpguard instances (default settings, 10 ms
# timeout, console sender) on the Redis at 127.0.0.1:6379 (a key prefix of their own), 200
# requests/s in all for <seconds> (default 60), half OTP sends to new numbers, half
# /limits/check, while a busy loop holds one core. Reports the sends refused with 503 (must be 0
# with a healthy Redis). Stops by itself; talks to 127.0.0.1 only. SRC as in saturation.sh.
mkdir -p /tmp/bench
set -u
cd "$(dirname "$0")/../.."
go build -o /tmp/bench/load ./cmd/otpguard-load && (cd ${SRC:-.} && go build -o /tmp/bench/otpguard-mixed ./cmd/otpguard) || exit 1
label=$1; secs=${2:-60}
prefix="mixed$RANDOM:"
pids=()
for i in 1 2 3; do
  env OTPGUARD_ADDR=127.0.0.1:1820$i OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_REDIS_PREFIX="$prefix" \
    OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
    OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_CONFIG=docs/bench/mixed.yaml OTPGUARD_LOG_LEVEL=warn OTPGUARD_SMS=console \
    /tmp/bench/otpguard-mixed > /tmp/bench/mixed-$label-$i.log 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for t in $(seq 100); do curl -s 127.0.0.1:1820$i/healthz >/dev/null && break; sleep 0.1; done
done
timeout $((secs + 10)) sh -c 'while :; do :; done' &
hog=$!
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
loads=()
for i in 1 2 3; do
  /tmp/bench/load -url http://127.0.0.1:1820$i -policy api -rate 67 -duration ${secs}s -send-share 0.5 \
    -phone-prefix +91981$i -ip-prefix 2001:db8:$i: -key-prefix mixed$i: > /tmp/bench/mixed-$label-load$i.txt 2>&1 &
  loads+=($!)
done
wait "${loads[@]}"
kill $hog 2>/dev/null; wait $hog 2>/dev/null
kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
echo "== $label: 3 instances, 200 requests/s for ${secs}s, half sends, one core held by a busy loop"
for i in 1 2 3; do
  echo "-- instance $i"; grep -E "^requests|status codes|latency|^sends|^server" /tmp/bench/mixed-$label-load$i.txt
done
echo "-- sends refused with 503, all instances: $(grep -h '^sends' /tmp/bench/mixed-$label-load?.txt | sed 's/.*refused with 503: //' | paste -sd+ | bc)"
echo "-- server warnings/errors: $(grep -chE 'level=(WARN|ERROR)|"level":"(WARN|ERROR)"' /tmp/bench/mixed-$label-?.log | paste -sd+ | bc)"
