#!/bin/bash
# usage: docs/bench/saturation-wrk.sh <label> [batch]: saturation.sh with wrk (C, epoll: a far
# cheaper client than otpguard-load's Go HTTP client, which shares the 2 cores) instead of
# otpguard-load: wrk -t2 -c64 -d8s on /limits/check, one check per request (or <batch> checks per
# request: then the figure is batched and labelled so), the fixed window of 200 hit 400 times
# alongside, then redis-benchmark -c 50 EVALSHA for the ratio, all in one run. SRC as in saturation.sh.
# BIN=<binary> runs that binary instead of building one; SERVER_ENV='GOMAXPROCS=1 ...' sets the server's
# environment; FLOOR=1 first measures GET /healthz the same way (the HTTP stack alone: no body, key or Redis),
# then /limits/check of keys denied from otpguard's memory (policy once: the whole handler, no Redis).
# It also splits the two cores' CPU between otpguard, Redis and wrk per check (from /proc, read only), and runs
# redis-benchmark RB_RUNS times (default 3; its rate swings 2x between runs on this VM), the ratio taken to the median.
mkdir -p /tmp/bench
set -u
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)"; exit 1; }
go build -o /tmp/bench/load ./cmd/otpguard-load && (cd ${SRC:-.} && go build -o /tmp/bench/otpguard-wrk ./cmd/otpguard) || exit 1
[ -n "${BIN:-}" ] && cp "$BIN" /tmp/bench/otpguard-wrk
label=$1; batch=${2:-1}; port=18183
env ${SERVER_ENV:-X=1} OTPGUARD_ADDR=127.0.0.1:$port OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_SMS=console OTPGUARD_REDIS_PREFIX="bench$RANDOM:" \
  OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
  OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_CONFIG=docs/bench/policies.yaml OTPGUARD_LOG_LEVEL=warn \
  /tmp/bench/otpguard-wrk > /tmp/bench/server-wrk-$label.log 2>&1 &
srv=$!
for i in $(seq 50); do curl -s 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
# CPU ticks (1/100 s) of a process, and the machine's busy and idle ticks, from /proc: read only.
ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
rpid=$(pgrep -f 'redis-server .*:6379' | head -1)
metric() { curl -s 127.0.0.1:$port/metrics | awk -v n="$1" '$1 ~ "^"n"({|$)" {s += $2} END {printf "%.6f", s}'; }
if [ -n "${FLOOR:-}" ]; then
  # The HTTP floor: GET /healthz (no body, no key, no Redis) through the same server and middleware.
  h0=$(metric process_cpu_seconds_total)
  wrk -t2 -c64 -d8s http://127.0.0.1:$port/healthz > /tmp/bench/wrk-floor-$label.txt 2>&1
  h1=$(metric process_cpu_seconds_total)
  # The handler without Redis: keys of policy once are denied from memory after their first two hits.
  m0=$(metric otpguard_decisions_from_memory_total); k0=$(metric process_cpu_seconds_total)
  wrk -t2 -c64 -d8s -s docs/bench/check.lua http://127.0.0.1:$port -- once 1 > /tmp/bench/wrk-memory-$label.txt 2>&1
  m1=$(metric otpguard_decisions_from_memory_total); k1=$(metric process_cpu_seconds_total)
fi
d0=$(metric otpguard_decisions_total); f0=$(metric otpguard_fallback_decisions_total)
s0=$(metric otpguard_shed_total); c0=$(metric process_cpu_seconds_total)
/tmp/bench/load -url http://127.0.0.1:$port -policy fw200 -keys 1 -rate 50 -duration 8s -workers 4 > /tmp/bench/fw-wrk-$label.txt 2>&1 &
fw=$!
r0=$(ticks $rpid); read -r busy0 idle0 <<<"$(machine)"
wrk -t2 -c64 -d8s --latency -s docs/bench/check.lua http://127.0.0.1:$port -- api $batch > /tmp/bench/wrk-$label.txt 2>&1 &
wpid=$!; sleep 7.8; w=$(ticks $wpid); wait $wpid
r1=$(ticks $rpid); read -r busy1 idle1 <<<"$(machine)"
wait $fw
d1=$(metric otpguard_decisions_total); f1=$(metric otpguard_fallback_decisions_total)
s1=$(metric otpguard_shed_total); c1=$(metric process_cpu_seconds_total)
kill $srv; wait $srv 2>/dev/null
rbs=()
for i in $(seq ${RB_RUNS:-3}); do
  /tmp/bench/load -only-redis-benchmark -redis-benchmark redis://127.0.0.1:6379/0 -duration 8s \
    -bucket-capacity 1000000000 -bucket-refill 1000000 > /tmp/bench/rb-wrk-$label-$i.txt 2>&1
  rbs+=($(awk '/^redis-benchmark [0-9]+ EVALSHA\/s$/ {print $2}' /tmp/bench/rb-wrk-$label-$i.txt))
done
rb=$(printf '%s\n' "${rbs[@]}" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
reqs=$(awk '/requests in/ {print $1}' /tmp/bench/wrk-$label.txt)
secs=$(awk '/requests in/ {sub(/s,$/, "", $4); print $4}' /tmp/bench/wrk-$label.txt)
non2xx=$(awk '/Non-2xx/ {print $NF}' /tmp/bench/wrk-$label.txt); non2xx=${non2xx:-0}
fwreqs=$(grep -o '^requests *[0-9]*' /tmp/bench/fw-wrk-$label.txt | awk '{print $2}')
echo "== $label (wrk -t2 -c64, $batch check(s) per request$([ "$batch" != 1 ] && echo ': BATCHED, not the 1-check figure'))"
grep -E "Latency  |50%|99%|requests in|Requests/sec|Non-2xx" /tmp/bench/wrk-$label.txt
awk -v r=$reqs -v n=$non2xx -v s=$secs -v b=$batch -v rb=$rb -v d=$d1-$d0 'BEGIN {
  ok = (r - n) / s; printf "decided       %.0f requests/s with 200 = %.0f checks/s\n", ok, ok * b
  printf "ratio         %.0f checks/s / redis-benchmark %.0f EVALSHA/s (median) = %.3f\n", ok * b, rb, ok * b / rb }'
echo "redis-bench   ${rbs[*]} EVALSHA/s in ${#rbs[@]} runs (-c 50): ratio $(printf '%s\n' "${rbs[@]}" | sort -n | awk -v r=$reqs -v n=$non2xx -v s=$secs -v b=$batch '
  NR == 1 {lo = $1} {hi = $1} END {printf "%.3f to %.3f", (r - n) / s * b / hi, (r - n) / s * b / lo}')"
awk -v d="$(echo "$d1 - $d0" | bc)" -v f="$(echo "$f1 - $f0" | bc)" -v s="$(echo "$s1 - $s0" | bc)" \
  -v c="$(echo "$c1 - $c0" | bc)" -v r=$reqs -v w=$fwreqs 'BEGIN {
  printf "server        %d decisions, %d from the fallback (%.2f%%), %d shed\n", d, f, 100 * f / d, s
  printf "server CPU    %.1f µs per request (%.2f CPU-seconds over %d wrk + %d fixed-window requests)\n", 1e6 * c / (r + w), c, r, w }'
awk -v r=$((r1 - r0)) -v w=$w -v n=$reqs -v b=$((busy1 - busy0)) -v i=$((idle1 - idle0)) 'BEGIN {
  printf "beside it     Redis %.1f µs, wrk %.1f µs per request; the 2 cores %.0f%% busy\n", 1e4 * r / n, 1e4 * w / n, 100 * b / (b + i) }'
echo "-- fixed window 200, 400 hits:"; grep -E "status codes" /tmp/bench/fw-wrk-$label.txt
if [ -n "${FLOOR:-}" ]; then
  awk -v rb=$rb -v c="$(echo "$h1 - $h0" | bc)" '/requests in/ {r = $1; sub(/s,$/, "", $4); s = $4}
    END { printf "floor         GET /healthz %.0f requests/s = %.3f of redis-benchmark; server CPU %.1f µs per request\n", r / s, r / s / rb, 1e6 * c / r }' \
    /tmp/bench/wrk-floor-$label.txt
  awk -v rb=$rb -v c="$(echo "$k1 - $k0" | bc)" -v m="$(echo "$m1 - $m0" | bc)" '/requests in/ {r = $1; sub(/s,$/, "", $4); s = $4}
    END { printf "from memory   /limits/check denied from memory %.0f requests/s (%.1f%% from memory) = %.3f of redis-benchmark; server CPU %.1f µs per request\n", r / s, 100 * m / r, r / s / rb, 1e6 * c / r }' \
    /tmp/bench/wrk-memory-$label.txt
fi
