#!/bin/bash
# usage: docs/bench/log-sample.sh [rounds] [seconds]: what the request log costs per /limits/check. One
# otpguard binary, three servers on the shared Redis: a line per allowed check (OTPGUARD_LOG_ALLOWED_CHECKS=1,
# the old promise), the default sample (one in 100) and OTPGUARD_LOG_LEVEL=warn (no request line), each
# logging to a file; wrk -t2 -c64 on /limits/check (policy wide of docs/bench/policies.yaml), in alternating
# rounds (default 3 of 8 s). Prints checks/s, p99 and otpguard's CPU per check (from /proc, read only).
set -u
rounds=${1:-3}; secs=${2:-8}
cd "$(dirname "$0")/../.."
. docs/bench/peers-lib.sh # ticks, wait_http
out=$(mktemp -d /tmp/log-sample.XXXXXX)
go build -o $out/otpguard ./cmd/otpguard || exit 1
start() {
  env $2 OTPGUARD_ADDR=127.0.0.1:$1 OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_SMS=console OTPGUARD_REDIS_PREFIX="ls$RANDOM:" \
    OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef OTPGUARD_CONFIG=docs/bench/policies.yaml \
    OTPGUARD_DATA_DIR=$(mktemp -d) $out/otpguard > $out/server-$1.log 2>&1 &
}
start 18301 OTPGUARD_LOG_ALLOWED_CHECKS=1; p1=$!
start 18302 X=1; p2=$!
start 18303 OTPGUARD_LOG_LEVEL=warn; p3=$!
trap 'kill $p1 $p2 $p3 2>/dev/null' EXIT
for port in 18301 18302 18303; do wait_http 127.0.0.1:$port/healthz; done
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq $rounds); do
  for run in "18301 $p1 every-line" "18302 $p2 default" "18303 $p3 warn"; do
    set -- $run
    s0=$(ticks $2)
    wrk -t2 -c64 -d${secs}s --latency -s docs/bench/check.lua http://127.0.0.1:$1 -- wide 1 > $out/wrk.txt
    s1=$(ticks $2)
    awk -v l=$3 -v r=$r -v s=$((s1 - s0)) '/requests in/ {n = $1} /^Requests\/sec/ {rate = $2} $1 == "99%" {p99 = $2}
      END {printf "round %d %-10s %6.0f checks/s  p99 %-8s otpguard %.1f µs per check\n", r, l, rate, p99, 1e4 * s / n}' $out/wrk.txt
  done
done
echo "request lines written: every-line $(grep -c '"msg":"request"' $out/server-18301.log), default $(grep -c '"msg":"request"' $out/server-18302.log), warn $(grep -c '"msg":"request"' $out/server-18303.log)"
