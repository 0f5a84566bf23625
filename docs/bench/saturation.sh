#!/bin/bash
# usage: docs/bench/saturation.sh <label> [VAR=value...]: one otpguard (default settings, 10 ms timeout)
# on the Redis at 127.0.0.1:6379 (its own key prefix), saturated by 64 connections of otpguard-load
# while a fixed window of 200 is hit 400 times; then redis-benchmark EVALSHA for the ratio.
# SRC=<another checkout> builds otpguard from there (e.g. the base commit) for a comparison in one run.
mkdir -p /tmp/bench
set -u
cd "$(dirname "$0")/../.."
go build -o /tmp/bench/load ./cmd/otpguard-load && (cd ${SRC:-.} && go build -o /tmp/bench/otpguard ./cmd/otpguard) || exit 1
label=$1; shift
port=18181
env OTPGUARD_ADDR=127.0.0.1:$port OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_SMS=console OTPGUARD_REDIS_PREFIX="bench$RANDOM:" \
  OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
  OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_CONFIG=docs/bench/policies.yaml OTPGUARD_LOG_LEVEL=warn "$@" \
  /tmp/bench/otpguard > /tmp/bench/server-$label.log 2>&1 &
srv=$!
for i in $(seq 50); do curl -s 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
# the fixed window of 200, hit 400 times alongside the saturation
/tmp/bench/load -url http://127.0.0.1:$port -policy fw200 -keys 1 -rate 50 -duration 8s -workers 4 > /tmp/bench/fw-$label.txt 2>&1 &
fw=$!
/tmp/bench/load -url http://127.0.0.1:$port -policy api -rate 0 -workers 64 -connections 64 -duration 8s \
  -redis-benchmark redis://127.0.0.1:6379/0 -bucket-capacity 1000000000 -bucket-refill 1000000 > /tmp/bench/sat-$label.txt 2>&1
wait $fw
kill $srv; wait $srv 2>/dev/null
echo "== $label"; grep -E "requests|success|status codes|latency|server|ratio" /tmp/bench/sat-$label.txt
echo "-- fixed window 200, 400 hits:"; grep -E "status codes|server  " /tmp/bench/fw-$label.txt
