#!/bin/bash
# usage: [SETSID=1] [BEFORE=<dir>] docs/bench/redis-cpu.sh [rounds]: Redis CPU per /limits/check decision,
# on a private redis-server (a free port, no persistence), next to a bare redis-benchmark EVALSHA of
# INCR + PEXPIRE on the same server, in alternating rounds. BEFORE=<dir> also runs the otpguard built
# from <dir> (e.g. `git archive main | tar -x -C /tmp/main-src`) in each round, for before/after.
# Each round, each binary: otpguard on the private Redis, wrk -t2 -c64 -d8s of one check per request
# (docs/bench/check.lua, 1,000 keys per thread) for a token bucket and a fixed window too large to
# deny; Redis's CPU is utime + stime of its process (/proc/<pid>/stat, read only) over the run,
# divided by the decisions otpguard counted (otpguard_decisions_total). The bare script call is
# redis-benchmark -c 50 -r 1000 EVALSHA (INCR + PEXPIRE 60000), Redis's CPU divided by its calls.
set -u
cd "$(dirname "$0")/../.."
rounds=${1:-3}
command -v wrk >/dev/null || { echo "wrk is not installed"; exit 1; }
mkdir -p /tmp/bench-cpu
go build -o /tmp/bench-cpu/after ./cmd/otpguard || exit 1
bins=(after)
if [ -n "${BEFORE:-}" ]; then (cd "$BEFORE" && go build -o /tmp/bench-cpu/before ./cmd/otpguard) || exit 1; bins=(before after); fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# SETSID=1 starts it in a session (and so a scheduling autogroup) of its own, as a daemon's: it then
# answers sooner than when it shares one with otpguard and wrk, and fewer checks share a script call
# (docs/benchmarks.md, "Redis CPU per decision"). The machine's Redis on 6379, which peers.sh uses, is a daemon.
${SETSID:+setsid} redis-server --port $port --bind 127.0.0.1 --save "" --appendonly no --dir /tmp/bench-cpu >/tmp/bench-cpu/redis.log 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null' EXIT
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
cat > /tmp/bench-cpu/policies.yaml <<'YAML'
limits:
  api:
    algorithm: token_bucket
    capacity: 1000000000
    refill_per_second: 1000000
  win:
    algorithm: fixed_window
    limit: 1000000000
    window: 1m
YAML
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
metric() { curl -s 127.0.0.1:$2/metrics | awk -v n="$1" '$1 ~ "^"n"({|$)" {s += $2} END {printf "%.0f", s}'; }
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
sha=$(redis-cli -p $port SCRIPT LOAD "local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) return n")
run_otpguard() { # binary policy
  local hp=$((port + 1))
  env OTPGUARD_ADDR=127.0.0.1:$hp OTPGUARD_REDIS_URL=redis://127.0.0.1:$port/0 OTPGUARD_SMS=console \
    OTPGUARD_REDIS_PREFIX="cpu$RANDOM:" OTPGUARD_API_KEYS=$OTPGUARD_API_KEY OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
    OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_CONFIG=/tmp/bench-cpu/policies.yaml OTPGUARD_LOG_LEVEL=warn \
    /tmp/bench-cpu/$1 > /tmp/bench-cpu/server-$1.log 2>&1 &
  local srv=$!
  for i in $(seq 50); do curl -s 127.0.0.1:$hp/healthz >/dev/null && break; sleep 0.1; done
  local d0 r0 d1 r1
  redis-cli -p $port CONFIG RESETSTAT >/dev/null
  d0=$(metric otpguard_decisions_total $hp); r0=$(ticks $rpid)
  wrk -t2 -c64 -d8s -s docs/bench/check.lua http://127.0.0.1:$hp -- $2 1 > /tmp/bench-cpu/wrk.txt 2>&1
  d1=$(metric otpguard_decisions_total $hp); r1=$(ticks $rpid)
  kill $srv; wait $srv 2>/dev/null
  local es ec; es=$(evalsha_usec); ec=$(evalsha_calls)
  awk -v b=$1 -v p=$2 -v d=$((d1 - d0)) -v r=$((r1 - r0)) -v e=$es -v c=$ec 'BEGIN {
    printf "%-7s %-4s %8d decisions %6.0f/s  Redis %.2f µs per decision (process), scripts %.2f µs per decision (commandstats), %.2f decisions per script call\n", b, p, d, d / 8, 1e4 * r / d, e / d, d / c }'
}
# evalsha_usec is the µs Redis spent running EVALSHA and EVAL since the last CONFIG RESETSTAT
# (commandstats: the scripts alone, without reading, parsing and replying).
evalsha_usec() {
  redis-cli -p $port INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ {s += $5} END {print s + 0}'
}
# evalsha_calls is the script calls (EVALSHA and EVAL) since the last CONFIG RESETSTAT: one per
# decision, unless a pipeline's calls were joined into one (internal/store/merge.go).
evalsha_calls() {
  redis-cli -p $port INFO commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ {s += $3} END {print s + 0}'
}
run_bare() {
  local n=400000 r0 r1
  redis-cli -p $port CONFIG RESETSTAT >/dev/null
  r0=$(ticks $rpid)
  redis-benchmark -p $port -c 50 -r 1000 -n $n EVALSHA $sha 1 bare:__rand_int__ > /tmp/bench-cpu/rb.txt 2>&1
  r1=$(ticks $rpid)
  awk -v n=$n -v r=$((r1 - r0)) -v e=$(evalsha_usec) 'BEGIN {
    printf "bare    -c50 %8d EVALSHA (INCR + PEXPIRE)  Redis %.2f µs per call (process), script %.2f µs per call (commandstats)\n", n, 1e4 * r / n, e / n }'
}
echo "redis-cpu.sh $(date -u +%FT%TZ) $(git rev-parse --short HEAD) redis $(redis-server --version | awk '{print $3}') load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq $rounds); do
  echo "-- round $round"
  run_bare
  for b in "${bins[@]}"; do run_otpguard $b api; run_otpguard $b win; done
done
