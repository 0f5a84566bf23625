#!/bin/sh
# docs/benchmarks.md, "One OTP send": a default OTP send before (BASE, a checkout
# of the base commit with this branch's benchmark files copied in) and
# after (this tree), interleaved, three runs each, in one run.
#
#   git worktree add --detach /tmp/base <base commit>
#   cp internal/guard/send_bench_test.go /tmp/base/internal/guard/
#   cp internal/app/send_bench_test.go /tmp/base/internal/app/
#   # on the base: wantDefaultSendRoundTrips = 8, closeOTP/flushOTP and
#   # flushWatch do nothing (the watch ran inside the request there);
#   # on 8084301: the two files are there already, copy the app one and
#   # drop its UnverifiedFloor (no unverified budget in that tree)
#   BASE=/tmp/base docs/bench/send-before-after.sh
#
# MID, when set, is a third tree run between the two in each round (e.g.
# a checkout of main, to compare a branch with both main and the base).
set -e
NEW=$(cd "$(dirname "$0")/../.." && pwd)
for i in 1 2 3; do
  for tree in "$BASE" ${MID:+"$MID"} "$NEW"; do
    echo "== $tree run $i"
    (cd "$tree" && go test -run '^$' -bench 'OTPSendDefault' -benchtime 2000x ./internal/guard/ 2>&1 | grep Benchmark)
    (cd "$tree" && go test -run '^$' -bench 'HandlerSend' -benchtime 2000x ./internal/app/ 2>&1 | grep Benchmark)
  done
done
