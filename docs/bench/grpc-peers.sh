#!/bin/bash
# usage: docs/bench/grpc-peers.sh [rounds] [seconds]: otpguard's Envoy gRPC service against
# envoyproxy/ratelimit's, side by side, on the same Redis (127.0.0.1:6379, each with a key prefix of its
# own), the same configuration (docs/bench/envoy.yaml) and the same load (docs/bench/grpcload: 64
# connections, one call in flight on each, one descriptor with a value drawn at random from 10,000),
# in alternating rounds (default 3 rounds of 10 s each). Prints per round and service: calls/s, p50/p99,
# and the CPU per decision of the service and of Redis (from /proc, read only), and otpguard's fallback
# decisions (must be 0). The peer is built OUTSIDE this checkout, in a temp dir with its own go.mod, at
# the pinned version below; nothing of it is committed. Both run with their defaults, logs at warn.
# PEER_ENV='REDIS_PIPELINE_WINDOW=150us REDIS_PIPELINE_LIMIT=8' passes settings to the peer,
# OG_ENV='GOMAXPROCS=1' to otpguard. FLOOR=1 also measures each on a domain no rule names (gRPC alone).
# OG_BIN=path runs that otpguard binary instead of this checkout's (e.g. main's, for a before/after in one
# sitting with the same load client and peer). LOAD_ARGS=-grpcgo drives grpc-go's client (the load client
# before the lean one, about twice its CPU per call; "client" in the output is grpcload's own CPU per
# call); LOAD_ARGS='-grpcgo -bdp' adds grpc-go's BDP pings (before 4e5e568 it always sent them; Envoy
# does not).
set -u
rounds=${1:-3}; secs=${2:-10}
cd "$(dirname "$0")/../.."
. docs/bench/peers-lib.sh # PEER, build_peer, start_peer, ticks, rpid
out=$(mktemp -d /tmp/grpc-peers.XXXXXX)
go build -o $out/otpguard ./cmd/otpguard && go build -o $out/grpcload ./docs/bench/grpcload || exit 1
[ -z "${OG_BIN:-}" ] || cp "$OG_BIN" $out/otpguard || exit 1
# The peer, from the Go module proxy, in a module of its own outside the checkout.
build_peer $out || exit 1
start_peer $out 18191 18190 18192 docs/bench/envoy.yaml
env ${OG_ENV:-X=1} OTPGUARD_ADDR=127.0.0.1:18193 OTPGUARD_GRPC_ADDR=127.0.0.1:18194 OTPGUARD_ENVOY_CONFIG=docs/bench/envoy.yaml \
  OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_REDIS_PREFIX="og$RANDOM:" OTPGUARD_SMS=console \
  OTPGUARD_API_KEYS=bench-key-0123456789abcdef OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef \
  OTPGUARD_DATA_DIR=$(mktemp -d) OTPGUARD_LOG_LEVEL=warn $out/otpguard > $out/otpguard.log 2>&1 &
og=$!
trap 'kill $peer $og 2>/dev/null' EXIT
wait_http 127.0.0.1:18193/healthz
sleep 1
metric() { curl -s 127.0.0.1:18193/metrics | awk -v n="$1" '$1 ~ "^"n"({|$)" {s += $2} END {printf "%.0f", s}'; }

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)${OG_BIN:+, otpguard $OG_BIN}${LOAD_ARGS:+, grpcload $LOAD_ARGS}, $PEER@$PEER_VERSION, $rounds rounds of ${secs}s"
f0=$(metric otpguard_fallback_decisions_total)
# COMPARE_CLIENT=1: each round also with grpc-go's client (rows "/grpcgo"), the lean and the old client
# alternating, to tell what the client's CPU does to the ratio from what the services do.
clients=(lean); [ -z "${COMPARE_CLIENT:-}" ] || clients=(lean grpcgo)
for r in $(seq $rounds); do
  for i in $(seq 0 $((${#clients[@]} - 1))); do
    cl=${clients[$(((i + r - 1) % ${#clients[@]}))]}; args=${LOAD_ARGS:-}; tag=
    [ $cl = lean ] || { args="$args -grpcgo"; tag=/grpcgo; }
    for svc in peer otpguard; do
      if [ $svc = peer ]; then pid=$peer; port=18190; else pid=$og; port=18194; fi
      s0=$(ticks $pid); r0=$(ticks $rpid)
      $out/grpcload -addr 127.0.0.1:$port -conns 64 -duration ${secs}s $args > $out/$svc$cl-$r.txt 2>&1
      s1=$(ticks $pid); r1=$(ticks $rpid)
      awk -v svc=$svc$tag -v r=$r -v s=$((s1 - s0)) -v rd=$((r1 - r0)) '
        /^calls/ {n = $2; rate = $5} /^latency/ {p50 = $3; p99 = $5} /^answers/ {ok = $3; over = $5; errs = $7} /^client CPU/ {cl = $3} /^client syscalls/ {sr = $3; sw = $5}
        END {printf "round %d %-15s %7.0f calls/s  p50 %-10s p99 %-10s service %5.1f µs/decision  Redis %5.1f µs/decision  client %5.1f µs/call, %.2f reads %.2f writes  (OK %d, OVER %d, errors %d)\n",
          r, svc, rate, p50, p99, 1e4 * s / n, 1e4 * rd / n, cl, sr, sw, ok, over, errs}' $out/$svc$cl-$r.txt
    done
  done
done
if [ -n "${FLOOR:-}" ]; then
  # The gRPC floor: a domain no rule names, answered OK by both without Redis.
  for svc in peer otpguard; do
    if [ $svc = peer ]; then pid=$peer; port=18190; else pid=$og; port=18194; fi
    s0=$(ticks $pid)
    $out/grpcload -addr 127.0.0.1:$port -conns 64 -duration ${secs}s -domain nosuch ${LOAD_ARGS:-} > $out/$svc-floor.txt 2>&1
    s1=$(ticks $pid)
    awk -v svc=$svc -v s=$((s1 - s0)) '/^calls/ {n = $2; rate = $5} /^latency/ {p50 = $3; p99 = $5}
      END {printf "floor   %-9s %7.0f calls/s  p50 %-10s p99 %-10s service %5.1f µs/call (no rule, no Redis)\n", svc, rate, p50, p99, 1e4 * s / n}' $out/$svc-floor.txt
  done
fi
f1=$(metric otpguard_fallback_decisions_total)
echo "otpguard fallback decisions: $((f1 - f0))"
echo "(outputs in $out)"
