#!/bin/bash
# usage: OG_BEFORE=path docs/bench/before-after.sh [rounds] [seconds]: two otpguard binaries, "before"
# (OG_BEFORE, e.g. main built in a temp dir) and "after" (this checkout), side by side with
# envoyproxy/ratelimit in ONE run, on the same Redis, so that a loaded machine's drift falls on all alike.
# Each round (default 3 of 10 s) runs, in an order that turns round by round:
#   - gRPC, as docs/bench/grpc-peers.sh: grpcload -conns 64 on docs/bench/envoy.yaml, against the peer,
#     before and after;
#   - HTTP, as the otpguard rows of docs/bench/peers.sh: wrk -t2 -c64 --latency of POST /limits/check
#     (docs/bench/check.lua, policy "wide" of docs/bench/policies.yaml, otpguard at its defaults), against
#     before and after.
# Prints a line per round and service, with the CPU per decision of the service and of Redis (from /proc,
# read only), then the after/before and after/peer ratios of each round. Then, as many rounds again, before
# and after under the same load AT THE SAME TIME (gRPC, then HTTP): on a loaded machine the steadier ratio. The peer is built OUTSIDE the
# checkout (peers-lib.sh); nothing of it is committed.
set -u
rounds=${1:-3}; secs=${2:-10}
[ -n "${OG_BEFORE:-}" ] && [ -x "$OG_BEFORE" ] || { echo "OG_BEFORE=path to the 'before' otpguard binary"; exit 1; }
cd "$(dirname "$0")/../.."
. docs/bench/peers-lib.sh # PEER, build_peer, start_peer, ticks, rpid, wait_http
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)"; exit 1; }
out=$(mktemp -d /tmp/before-after.XXXXXX)
go build -o $out/after ./cmd/otpguard && go build -o $out/grpcload ./docs/bench/grpcload && cp "$OG_BEFORE" $out/before || exit 1
build_peer $out || exit 1
start_peer $out 18231 18230 18232 docs/bench/envoy.yaml

key=bench-key-0123456789abcdef
# start_og NAME HTTP_PORT GRPC_PORT: one otpguard at its defaults (as peers.sh), its pid in pid_NAME.
start_og() {
  env ${OG_ENV:-X=1} OTPGUARD_ADDR=127.0.0.1:$2 OTPGUARD_GRPC_ADDR=127.0.0.1:$3 OTPGUARD_ENVOY_CONFIG=docs/bench/envoy.yaml \
    OTPGUARD_CONFIG=docs/bench/policies.yaml OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_REDIS_PREFIX="og$RANDOM:" \
    OTPGUARD_SMS=console OTPGUARD_API_KEYS=$key OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
    OTPGUARD_DATA_DIR=$(mktemp -d) $out/$1 > $out/$1.log 2>&1 &
  eval pid_$1=$!
}
start_og before 18233 18234
start_og after 18243 18244
trap 'kill $peer $pid_before $pid_after 2>/dev/null' EXIT
export OTPGUARD_API_KEY=$key # check.lua's
wait_http 127.0.0.1:18233/healthz && wait_http 127.0.0.1:18243/healthz && wait_http 127.0.0.1:18231/healthcheck ||
  { echo "a service did not start ($out)"; exit 1; }
sleep 1

# run SVC PROTO ROUND: one round of SVC over PROTO; appends "svc proto round rate p99 svc_us redis_us".
run() {
  local svc=$1 proto=$2 r=$3 pid port f=$out/$1-$2-$3.txt s0 r0 s1 r1
  case $svc in peer) pid=$peer ;; before) pid=$pid_before ;; after) pid=$pid_after ;; esac
  s0=$(ticks $pid); r0=$(ticks $rpid)
  if [ $proto = grpc ]; then
    case $svc in peer) port=18230 ;; before) port=18234 ;; after) port=18244 ;; esac
    $out/grpcload -addr 127.0.0.1:$port -conns 64 -duration ${secs}s > $f 2>&1
  else
    case $svc in before) port=18233 ;; after) port=18243 ;; esac
    wrk -t2 -c64 -d${secs}s --latency -s docs/bench/check.lua http://127.0.0.1:$port -- wide 1 > $f 2>&1
  fi
  s1=$(ticks $pid); r1=$(ticks $rpid)
  awk -v svc=$svc -v p=$proto -v r=$r -v s=$((s1 - s0)) -v rd=$((r1 - r0)) '
    /^calls/ {n = $2; rate = $5; p99 = $5} /^latency/ {p99 = $5}
    /requests in/ {n = $1} /^Requests\/sec/ {rate = $2} $1 == "99%" {p99 = $2}
    END {if (!n) n = 1; printf "%s %s %d %.0f %s %.1f %.1f\n", svc, p, r, rate, p99, 1e4 * s / n, 1e4 * rd / n}' $f |
    tee -a $out/rows.txt | awk '{printf "round %d %-4s %-7s %7d /s  p99 %-12s service %5.1f µs/decision  Redis %5.1f µs/decision\n", $3, $2, $1, $4, $5, $6, $7}'
  grep -q Non-2xx $f && echo "   ($svc $proto round $r: $(grep Non-2xx $f))"
  return 0
}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), after: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (+ uncommitted)'), before: $OG_BEFORE, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   $PEER@$PEER_VERSION; $rounds rounds of ${secs}s"
for r in $(seq $rounds); do
  # Each round starts with another service: none always runs first (or last) on a machine that drifts.
  g=(peer before after); h=(before after)
  for i in 0 1 2; do run ${g[$(((i + r - 1) % 3))]} grpc $r; done
  for i in 0 1; do run ${h[$(((i + r - 1) % 2))]} http $r; done
done
echo "   load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
awk '{rate[$1, $2, $3] = $4; cpu[$1, $2, $3] = $6}
  END {for (r = 1; r <= '$rounds'; r++) printf "round %d  gRPC: after/before %.2fx calls/s, %.2fx CPU per decision; after/peer %.2fx, before/peer %.2fx  HTTP: after/before %.2fx checks/s, %.2fx CPU per decision\n", r,
    rate["after", "grpc", r] / rate["before", "grpc", r], cpu["after", "grpc", r] / cpu["before", "grpc", r],
    rate["after", "grpc", r] / rate["peer", "grpc", r], rate["before", "grpc", r] / rate["peer", "grpc", r],
    rate["after", "http", r] / rate["before", "http", r], cpu["after", "http", r] / cpu["before", "http", r]}' $out/rows.txt
# Both at once: the same load on before and after at the same time, so that whatever else the machine
# runs falls on both alike (on a loaded machine the steadier figure): their calls/s and CPU per decision.
both() {
  local proto=$1 r=$2 b0 a0 b1 a1 bg
  b0=$(ticks $pid_before); a0=$(ticks $pid_after)
  if [ $proto = grpc ]; then
    $out/grpcload -addr 127.0.0.1:18234 -conns 64 -duration ${secs}s > $out/both-before-$proto-$r.txt 2>&1 &
    bg=$!
    $out/grpcload -addr 127.0.0.1:18244 -conns 64 -duration ${secs}s > $out/both-after-$proto-$r.txt 2>&1
  else
    wrk -t2 -c64 -d${secs}s -s docs/bench/check.lua http://127.0.0.1:18233 -- wide 1 > $out/both-before-$proto-$r.txt 2>&1 &
    bg=$!
    wrk -t2 -c64 -d${secs}s -s docs/bench/check.lua http://127.0.0.1:18243 -- wide 1 > $out/both-after-$proto-$r.txt 2>&1
  fi
  wait $bg # the services run in the background too
  b1=$(ticks $pid_before); a1=$(ticks $pid_after)
  cat $out/both-before-$proto-$r.txt $out/both-after-$proto-$r.txt | awk -v p=$proto -v r=$r -v bs=$((b1 - b0)) -v as=$((a1 - a0)) '
    /^calls/ || /requests in/ {n[++i] = ($1 == "calls") ? $2 : $1} /^calls/ {rate[i] = $5} /^Requests\/sec/ {rate[i] = $2}
    END {printf "both at once, round %d %-4s before %6.0f/s %5.1f µs/decision  after %6.0f/s %5.1f µs/decision  after/before %.2fx calls/s, %.2fx CPU per decision\n",
      r, p, rate[1], 1e4 * bs / n[1], rate[2], 1e4 * as / n[2], rate[2] / rate[1], (as / n[2]) / (bs / n[1])}'
}
for r in $(seq $rounds); do both grpc $r; both http $r; done
for s in before after; do
  curl -s 127.0.0.1:$([ $s = before ] && echo 18233 || echo 18243)/metrics |
    awk -v s=$s '$1 ~ /^otpguard_fallback_decisions_total/ {n += $2} END {printf "%s: fallback decisions %d\n", s, n}'
done
