package store

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
)

// BenchmarkJoinedChecks sends joined calls of 13 one-limit checks of one
// policy (what a busy pipeline carries, docs/bench/redis-cpu.sh's
// "decisions per script call") on 2,000 keys, one call per op, for
// counting what Redis spends per decision: docs/benchmarks.md 6.3 runs it
// against a redis-server under callgrind (OTPGUARD_BENCH_REDIS=host:port,
// without which it skips) and divides the instructions by 13 per op.
// OTPGUARD_BENCH_K=n joins n checks a call instead: a call's own cost is
// about ten checks' (docs/benchmarks.md, "Issue 26 met").
func BenchmarkJoinedChecks(b *testing.B) {
	for _, pol := range []string{"window", "bucket"} {
		b.Run(pol, func(b *testing.B) { benchJoinedChecks(b, pol == "bucket") })
	}
}

func benchJoinedChecks(b *testing.B, bucket bool) {
	k := 13
	if n, err := strconv.Atoi(os.Getenv("OTPGUARD_BENCH_K")); err == nil && n > 0 {
		k = n
	}
	addr := os.Getenv("OTPGUARD_BENCH_REDIS")
	if addr == "" {
		b.Skip("OTPGUARD_BENCH_REDIS=host:port names the Redis to count on")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	st := NewRedis(rdb, "bench:")
	r := st.limits
	if err := st.LoadScripts(ctx); err != nil {
		b.Fatal(err)
	}
	j := joinables[takeLimitScript.Hash()]
	cmds := make([]*redis.Cmd, k)
	n := 0
	for b.Loop() {
		nowMs := r.redisNowMs()
		for i := range cmds {
			id := "wrk1-" + strconv.Itoa(n%2) + ":" + strconv.Itoa(n%1000)
			n++
			tk := limit.Take{Key: limit.Key{Space: "l:wide", ID: id}, Algorithm: limit.FixedWindow,
				Limit: 1_000_000_000, Window: time.Hour, Cost: 1, SpendIfAllowed: true}
			kind, param := 1, any(tk.Window.Milliseconds())
			if bucket {
				tk = limit.Take{Key: limit.Key{Space: "l:api", ID: id}, Algorithm: limit.TokenBucket,
					Limit: 1_000_000_000, Rate: 1_000_000, Cost: 1}
				kind, param = 2, interval(tk.Rate)
			}
			ref := r.limitRef(tk, nowMs)
			args := takeLimitScript.args(2, 10)
			args = append(args, ref.cur, ref.prev, kind, manyFlags(tk), tk.Limit, param, tk.Cost, ref.slice, ref.idx, ref.field)
			cmds[i] = redis.NewCmd(ctx, args...)
		}
		call, runs := j.join(ctx, cmds, 2*k)
		if err := rdb.Process(ctx, call); err != nil {
			b.Fatal(err)
		}
		j.split(call, cmds, runs)
		if v, err := cmds[k-1].Int64Slice(); err != nil || len(v) != 5 || v[0] != 1 {
			b.Fatalf("check: %v, %v; want allowed", v, err)
		}
	}
}
