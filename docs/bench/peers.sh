#!/bin/bash
# usage: docs/bench/peers.sh [rounds] [seconds]: otpguard beside its peers. otpguard's POST /limits/check at
# its DEFAULT settings (log level info, OTPGUARD_LOG_ALLOWED_CHECKS 100; the fixed window "wide" of
# docs/bench/policies.yaml, which no key reaches), a hand-written limiter (docs/bench/handwritten:
# net/http + go-redis + go-redis/redis_rate) and envoyproxy/ratelimit's POST /json (the pinned version of
# peers-lib.sh, built outside the checkout; domain "wide" of envoy-wide.yaml), all three on the same Redis
# (127.0.0.1:6379, a key prefix each), in alternating rounds (default 3 of 10 s) of wrk -t2 -c64 --latency
# (docs/bench/check.lua, envoy-json.lua: keys round-robin over 1,000 per thread). Then, where both speak it,
# gRPC (docs/bench/grpcload, docs/bench/envoy.yaml: 64 connections, 10,000 users of 100 a minute) for
# otpguard and envoyproxy/ratelimit; otpguard's GET /healthz (its HTTP floor); p99 at a fixed 10,000
# checks/s (cmd/otpguard-load, an open loop: wrk is closed-loop); and the bare script call,
# redis-benchmark -c 50 EVALSHA of INCR + PEXPIRE (when new) on 10,000 keys. CPU per decision, of each
# service and of Redis, is read from /proc (read only). Prints a line per round and the table of medians
# with ratios to the hand-written limiter. OG_ENV='OTPGUARD_LOG_LEVEL=warn' sets otpguard's environment,
# PEER_ENV the peer's. The figures of the last run are in docs/benchmarks.md.
set -u
rounds=${1:-3}; secs=${2:-10}
cd "$(dirname "$0")/../.."
. docs/bench/peers-lib.sh # PEER, build_peer, start_peer, ticks, rpid, wait_http
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)"; exit 1; }
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is not installed (apt-get install -y redis-tools)"; exit 1; }
out=$(mktemp -d /tmp/peers.XXXXXX)
go build -o $out/otpguard ./cmd/otpguard && go build -o $out/load ./cmd/otpguard-load &&
  go build -o $out/grpcload ./docs/bench/grpcload && (cd docs/bench/handwritten && go build -o $out/handwritten .) || exit 1
build_peer $out || exit 1

start_peer $out 18211 18210 18212 docs/bench/envoy.yaml docs/bench/envoy-wide.yaml
ADDR=127.0.0.1:18201 REDIS_ADDR=127.0.0.1:6379 PREFIX="hw$RANDOM:" $out/handwritten > $out/handwritten.log 2>&1 &
hw=$!
key=bench-key-0123456789abcdef
env ${OG_ENV:-X=1} OTPGUARD_ADDR=127.0.0.1:18203 OTPGUARD_GRPC_ADDR=127.0.0.1:18204 OTPGUARD_ENVOY_CONFIG=docs/bench/envoy.yaml \
  OTPGUARD_CONFIG=docs/bench/policies.yaml OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_REDIS_PREFIX="og$RANDOM:" \
  OTPGUARD_SMS=console OTPGUARD_API_KEYS=$key OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
  OTPGUARD_DATA_DIR=$(mktemp -d) $out/otpguard > $out/otpguard.log 2>&1 &
og=$!
trap 'kill $peer $hw $og 2>/dev/null' EXIT
wait_http 127.0.0.1:18203/healthz && wait_http 127.0.0.1:18211/healthcheck || { echo "a service did not start ($out)"; exit 1; }
sleep 1
export OTPGUARD_API_KEY=$key
printf 'svc\tproto\tround\trate\tp99ms\tsvc_us\tredis_us\n' > $out/rows.tsv

# ms VALUE: a wrk or grpcload latency (850.00us, 6.52ms, 1.02s) in milliseconds.
ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$|µs$/) n /= 1000; else if (v ~ /[^m]s$/) n *= 1000; printf "%.2f", n }'; }

# measure SVC PROTO ROUND PID CMD...: runs CMD, reads the CPU of PID and of Redis around it, appends a row.
measure() {
  local svc=$1 proto=$2 r=$3 pid=$4; shift 4
  local s0 r0 s1 r1 n rate p99
  s0=$(ticks $pid); r0=$(ticks $rpid)
  "$@" > $out/$svc-$proto-$r.txt 2>&1
  s1=$(ticks $pid); r1=$(ticks $rpid)
  if [ $proto = grpc ]; then
    n=$(awk '/^calls/ {print $2}' $out/$svc-$proto-$r.txt); rate=$(awk '/^calls/ {print $5}' $out/$svc-$proto-$r.txt)
    p99=$(ms "$(awk '/^latency/ {print $5}' $out/$svc-$proto-$r.txt)")
  else
    n=$(awk '/requests in/ {print $1}' $out/$svc-$proto-$r.txt); rate=$(awk '/^Requests\/sec/ {print $2}' $out/$svc-$proto-$r.txt)
    p99=$(ms "$(awk '$1 == "99%" {print $2}' $out/$svc-$proto-$r.txt)")
    grep -q Non-2xx $out/$svc-$proto-$r.txt && echo "   ($svc round $r: $(grep Non-2xx $out/$svc-$proto-$r.txt))"
  fi
  awk -v svc=$svc -v p=$proto -v r=$r -v n=${n:-0} -v rate=${rate:-0} -v p99=$p99 -v s=$((s1 - s0)) -v rd=$((r1 - r0)) 'BEGIN {
    if (n == 0) n = 1
    printf "%s\t%s\t%d\t%.0f\t%s\t%.1f\t%.1f\n", svc, p, r, rate, p99, 1e4 * s / n, 1e4 * rd / n }' | tee -a $out/rows.tsv |
    awk -F'\t' '{printf "round %d %-5s %-12s %7d checks/s  p99 %6.2f ms  service %5.1f µs/decision  Redis %5.1f µs/decision\n", $3, $2, $1, $4, $5, $6, $7}'
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (+ uncommitted)'), $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   $PEER@$PEER_VERSION; $rounds rounds of ${secs}s; otpguard ${OG_ENV:-at its defaults}"
wrkc="wrk -t2 -c64 -d${secs}s --latency"
http_round() {
  case $1 in
  handwritten) measure handwritten http $2 $hw $wrkc -s docs/bench/check.lua http://127.0.0.1:18201 -- wide 1 ;;
  envoy) measure envoy http $2 $peer $wrkc -s docs/bench/envoy-json.lua http://127.0.0.1:18211 -- wide ;;
  otpguard) measure otpguard http $2 $og $wrkc -s docs/bench/check.lua http://127.0.0.1:18203 -- wide 1 ;;
  esac
}
for r in $(seq $rounds); do
  # Each round starts with another service: none always runs first (or last) on a machine that drifts.
  order=(handwritten envoy otpguard)
  for i in 0 1 2; do http_round ${order[$(((i + r - 1) % 3))]} $r; done
  measure envoy grpc $r $peer $out/grpcload -addr 127.0.0.1:18210 -conns 64 -duration ${secs}s
  measure otpguard grpc $r $og $out/grpcload -addr 127.0.0.1:18204 -conns 64 -duration ${secs}s
done
measure otpguard-healthz http 1 $og $wrkc http://127.0.0.1:18203/healthz

# p99 at a fixed 10,000 checks/s (open loop: a slow answer does not slow the arrivals).
# child_ticks FILE: this shell's children's CPU (user + system) so far, in 1/100 s, from what bash's times
# wrote to FILE (in this shell: a $(...) would run it in a subshell without them).
child_ticks() { awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%.0f", t * 100 }' $1; }
s0=$(ticks $og); r0=$(ticks $rpid); times > $out/times0.txt
$out/load -url http://127.0.0.1:18203 -policy wide -keys 10000 -rate ${RATE:-10000} -duration ${secs}s > $out/fixed-rate.txt 2>&1
s1=$(ticks $og); r1=$(ticks $rpid); times > $out/times1.txt; l0=$(child_ticks $out/times0.txt); l1=$(child_ticks $out/times1.txt)

# The bare script call: redis-benchmark counts requests, not time; about secs x 40,000 of them.
sha=$(redis-cli -h 127.0.0.1 -p 6379 SCRIPT LOAD "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n")
b0=$(ticks $rpid)
redis-benchmark -h 127.0.0.1 -p 6379 -c 50 -n $((secs * 40000)) -r 10000 -q --csv \
  EVALSHA $sha 1 "rb$RANDOM:__rand_int__" 3600000 > $out/redis-benchmark.txt 2>&1
b1=$(ticks $rpid)
rb=$(awk -F'"' '/EVALSHA/ {print $4}' $out/redis-benchmark.txt)

echo
echo "| | checks/s | p99 | CPU per decision, server | Redis CPU per decision | checks/s to the hand-written |"
echo "|---|---|---|---|---|---|"
awk -F'\t' -v fixed="$out/fixed-rate.txt" -v rb=${rb:-0} -v rbcpu=$((b1 - b0)) -v rbn=$((secs * 40000)) '
  function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  NR > 1 { k = $1 " " $2; n[k]++; rate[k, n[k]] = $4; p99[k, n[k]] = $5; svc[k, n[k]] = $6; red[k, n[k]] = $7; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END {
    for (i = 1; i <= m; i++) { k = order[i]
      for (j = 1; j <= n[k]; j++) { a[j] = rate[k, j] }; R[k] = median(a, n[k])
      for (j = 1; j <= n[k]; j++) { a[j] = p99[k, j] }; P[k] = median(a, n[k])
      for (j = 1; j <= n[k]; j++) { a[j] = svc[k, j] }; S[k] = median(a, n[k])
      for (j = 1; j <= n[k]; j++) { a[j] = red[k, j] }; D[k] = median(a, n[k]) }
    base = R["handwritten http"]
    name["otpguard http"] = "otpguard `/limits/check`, fixed window, defaults"
    name["handwritten http"] = "hand-written: net/http + go-redis + redis_rate"
    name["envoy http"] = "envoyproxy/ratelimit `/json`"
    name["otpguard grpc"] = "otpguard gRPC `ShouldRateLimit` (envoy.yaml)"
    name["envoy grpc"] = "envoyproxy/ratelimit gRPC (envoy.yaml)"
    name["otpguard-healthz http"] = "otpguard `GET /healthz` (its HTTP floor)"
    split("otpguard http,handwritten http,envoy http,otpguard grpc,envoy grpc,otpguard-healthz http", rows, ",")
    for (i = 1; i <= 6; i++) { k = rows[i]; if (!(k in R)) continue
      redis = k ~ /healthz/ ? "-" : sprintf("%.1f µs", D[k])
      printf "| %s | %\047d | %.1f ms | %.1f µs | %s | %.2fx |\n", name[k], R[k], P[k], S[k], redis, base ? R[k] / base : 0 }
    printf "| bare `redis-benchmark -c50 EVALSHA` (INCR + PEXPIRE when new) | %\047d | - | - | %.1f µs | %.2fx |\n", rb, 1e4 * rbcpu / rbn, base ? rb / base : 0
    if (R["envoy http"]) printf "\notpguard / envoyproxy/ratelimit (HTTP): %.2fx; gRPC: %.2fx\n", R["otpguard http"] / R["envoy http"], R["envoy grpc"] ? R["otpguard grpc"] / R["envoy grpc"] : 0
  }' $out/rows.tsv
echo
echo "p99 at a fixed ${RATE:-10000} checks/s (otpguard-load -rate ${RATE:-10000} -keys 10000 -policy wide, ${secs}s):"
grep -E "^(requests|latency|late |load CPU|status|answered)" $out/fixed-rate.txt | sed 's/^/   /'
awk -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v l=$((l1 - l0)) -v n=$(awk '/^requests/ {print $2}' $out/fixed-rate.txt) -v secs=$secs 'BEGIN {
  printf "   CPU per request sent: otpguard %.1f µs, Redis %.1f µs, the load generator %.1f µs; the load generator alone %.2f cores\n",
    1e4 * s / n, 1e4 * r / n, 1e4 * l / n, l / 100 / secs }'
echo "(outputs in $out)"
