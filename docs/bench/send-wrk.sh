#!/bin/bash
# usage: [BASE=<checkout>] [PORT=18184] docs/bench/send-wrk.sh [rounds]
# CPU per OTP send: wrk -t2 -c16 -d8s on POST /otp/send, every
# request to a new number, every default rule on at limits out of reach (send-policies.yaml),
# the console sender to /dev/null, one Redis. Prints otpguard's and Redis's CPU per send
# (from /proc, read only) and sends/s. With BASE, a checkout of an older tree (e.g.
# `git worktree add --detach /tmp/base 8084301`) runs in alternating rounds with this one,
# each at its own default settings, and the last line is the median of the rounds' ratios.
set -u
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install -y wrk)"; exit 1; }
rounds=${1:-3}; port=${PORT:-18184}
out=/tmp/bench/send-$port; mkdir -p $out
trees=(new); go build -o $out/otpguard-send-new ./cmd/otpguard || exit 1
if [ -n "${BASE:-}" ]; then
  trees=(base new); (cd "$BASE" && go build -o $out/otpguard-send-base ./cmd/otpguard) || exit 1
fi
# A tree without the unverified budget refuses its field: its file goes without it.
if [ -n "${BASE:-}" ] && ! grep -rqs unverified_floor "$BASE/internal/app"; then
  sed 's/, unverified_floor: [0-9]*//' docs/bench/send-policies.yaml > $out/send-policies-base.yaml
else
  cp docs/bench/send-policies.yaml $out/send-policies-base.yaml
fi
cp docs/bench/send-policies.yaml $out/send-policies-new.yaml
ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }
rpid=$(pgrep -f 'redis-server .*:6379' | head -1)
export OTPGUARD_API_KEY=bench-key-0123456789abcdef
declare -A per
for i in $(seq "$rounds"); do
  for t in "${trees[@]}"; do
    prefix="sendbench$RANDOM:"
    OTPGUARD_ADDR=127.0.0.1:$port OTPGUARD_REDIS_URL=redis://127.0.0.1:6379/0 OTPGUARD_SMS=console \
      OTPGUARD_REDIS_PREFIX="$prefix" OTPGUARD_API_KEYS=$OTPGUARD_API_KEY \
      OTPGUARD_HMAC_KEY=0123456789abcdef0123456789abcdef OTPGUARD_DATA_DIR=$(mktemp -d) \
      OTPGUARD_CONFIG=$out/send-policies-$t.yaml OTPGUARD_LOG_LEVEL=warn \
      $out/otpguard-send-$t > /dev/null 2>$out/send-server-$t.log &
    srv=$!
    for _ in $(seq 100); do curl -s 127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
    # A second's warm-up (connections, the watch's first batch), then the measured run.
    wrk -t2 -c16 -d1s -s docs/bench/send.lua http://127.0.0.1:$port -- 0 >/dev/null 2>&1
    s0=$(ticks $srv); r0=$(ticks $rpid)
    wrk -t2 -c16 -d8s --latency -s docs/bench/send.lua http://127.0.0.1:$port -- 10000000 > $out/send-wrk-$t.txt 2>&1
    s1=$(ticks $srv); r1=$(ticks $rpid)
    kill $srv; wait $srv 2>/dev/null
    # The round's keys go with it: about four per send, with hours to live (2.7 million, 500 MB,
    # after five rounds), which made every later measure on the shared Redis 20-50 % dearer.
    redis-cli -p 6379 --scan --pattern "$prefix*" | xargs -r -n 1000 redis-cli -p 6379 unlink > /dev/null
    reqs=$(awk '/requests in/ {print $1}' $out/send-wrk-$t.txt)
    secs=$(awk '/requests in/ {sub(/s,$/, "", $4); print $4}' $out/send-wrk-$t.txt)
    bad=$(awk '/Non-2xx/ {print $NF}' $out/send-wrk-$t.txt); bad=${bad:-0}
    p99=$(awk '$1 == "99%" {print $2}' $out/send-wrk-$t.txt)
    # A refused send costs less than a sent one: a round with any is no measure of a send.
    if [ "$bad" != 0 ] || [ -z "$reqs" ]; then
      echo "round $i $t: ${bad:-?} of ${reqs:-?} sends not answered 200 (see $out/send-wrk-$t.txt, $out/send-server-$t.log)"; exit 1
    fi
    us=$(awk -v c=$((s1 - s0)) -v n=$((reqs - bad)) 'BEGIN {printf "%.1f", 1e4 * c / n}')
    per[$t,$i]=$us
    awk -v t=$t -v i=$i -v n=$((reqs - bad)) -v b=$bad -v s=$secs -v us=$us -v r=$((r1 - r0)) -v p=$p99 'BEGIN {
      printf "round %d %-4s %6.0f sends/s (%d refused)  otpguard CPU %6.1f µs/send  Redis %5.1f µs/send  p99 %s\n",
        i, t, n / s, b, us, 1e4 * r / n, p }'
  done
  [ -n "${BASE:-}" ] && echo "round $i new/base $(awk -v a=${per[new,$i]} -v b=${per[base,$i]} 'BEGIN {printf "%.2f", a / b}')"
done
if [ -n "${BASE:-}" ]; then
  for i in $(seq "$rounds"); do awk -v a=${per[new,$i]} -v b=${per[base,$i]} 'BEGIN {printf "%.3f\n", a / b}'; done |
    sort -n | awk '{v[NR] = $1} END {printf "median new/base CPU per send over %d rounds: %.2f\n", NR, v[int((NR + 1) / 2)]}'
fi
