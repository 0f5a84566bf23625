# Sourced by grpc-peers.sh and peers.sh (not run on its own): the pinned envoyproxy/ratelimit, built
# outside the checkout, and the readings both scripts take from /proc (read only).
PEER=github.com/envoyproxy/ratelimit
PEER_VERSION=v1.4.1-0.20260122083618-3fb702589d36

# build_peer DIR: envoyproxy/ratelimit at PEER_VERSION, from the Go module proxy, in a module of its own
# in DIR/peer, to DIR/ratelimit. Nothing of it is committed.
build_peer() {
  mkdir -p $1/peer && (cd $1/peer && printf 'module peerbuild\n\ngo 1.26\n' > go.mod &&
    go get $PEER/src/service_cmd@$PEER_VERSION >/dev/null 2>&1 &&
    go build -o $1/ratelimit $PEER/src/service_cmd) || { echo "could not build $PEER@$PEER_VERSION"; return 1; }
}

# start_peer DIR HTTP_PORT GRPC_PORT DEBUG_PORT CONFIG...: runs DIR/ratelimit on the shared Redis with its
# defaults (logs at warn, its own key prefix), the rate-limit configurations CONFIG... in its runtime
# directory; its pid is in $peer. PEER_ENV='REDIS_PIPELINE_WINDOW=150us ...' passes settings.
# Its stats go where otpguard's go: to an in-process Prometheus registry (USE_PROMETHEUS, served on
# DEBUG_PORT+1000), as no statsd runs here. PEER_STATS=null turns its stats off (DISABLE_STATS: the peer
# at its cheapest); PEER_STATS=log is what these scripts did before 4 Dec 2026 (USE_STATSD=false alone),
# which sends the peer's stats to its logging sink: a JSON line on stderr per timer sample, about a
# line per decision, which charged the peer 10-25 µs of CPU per decision that a deployment does not pay.
start_peer() {
  local dir=$1 http=$2 grpc=$3 debug=$4; shift 4
  mkdir -p $dir/rt/ratelimit/config && cp "$@" $dir/rt/ratelimit/config/
  local stats="USE_PROMETHEUS=true PROMETHEUS_ADDR=127.0.0.1:$((debug + 1000))"
  case ${PEER_STATS:-prometheus} in
    null) stats=DISABLE_STATS=true ;;
    log) stats=X=1 ;;
  esac
  env ${PEER_ENV:-X=1} USE_STATSD=false $stats LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:6379 \
    CACHE_KEY_PREFIX="peer$RANDOM:" RUNTIME_ROOT=$dir/rt RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT=$http DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc \
    $dir/ratelimit > $dir/peer.log 2>&1 &
  peer=$!
}

# ticks PID: the CPU (user + system) PID has used, in 1/100 s.
ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }

# The shared Redis's pid, for its CPU.
rpid=$(pgrep -f 'redis-server .*:6379' | head -1)
[ -n "$rpid" ] || { echo "no redis-server on :6379"; exit 1; }

# wait_http URL: up to 10 s for URL to answer.
wait_http() { for i in $(seq 100); do curl -s "$1" >/dev/null && return 0; sleep 0.1; done; return 1; }
