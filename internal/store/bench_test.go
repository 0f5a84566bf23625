package store_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The benchmarks of one decision against a real Redis. Run them with
//
//	go test -run '^$' -bench . -benchtime 3s ./internal/store/
//
// Each reports ns/op and roundtrips/op: the requests the client sent to
// Redis per decision (a MULTI/EXEC or a pipeline is one), counted by a
// go-redis hook. Connection set-up (HELLO, CLIENT, AUTH, SELECT) is not a
// decision's round trip and is not counted.

// benchKeys are the subjects the benchmarks rotate over: many buckets, as
// in production, not one hot key.
const benchKeys = 1000

func benchIDs() []string {
	ids := make([]string, benchKeys)
	for i := range ids {
		ids[i] = "user:" + strconv.Itoa(100000+i)
	}
	return ids
}

// bigBucket never denies in a benchmark, so every decision takes the
// longer path of the script (GET, then SET with PX).
func bigBucket(id string) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:api", ID: id, Name: "tb"}, Algorithm: limit.TokenBucket,
		Limit: 1_000_000_000, Rate: 1_000_000, Cost: 1}
}

func bigWindow(id string) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:search", ID: id, Name: "fw"}, Algorithm: limit.FixedWindow,
		Limit: 1_000_000_000, Window: time.Minute, Cost: 1}
}

func benchTake(b *testing.B, mk func(id string) limit.Take, batch int) {
	s, rt, _ := redistest.Store(b)
	ctx := context.Background()
	ids := benchIDs()
	takes := make([]limit.Take, batch)
	i := 0
	for b.Loop() {
		if i == 0 { // b.Loop resets the timer on its first call: count from here
			rt.Reset()
		}
		for j := range takes {
			takes[j] = mk(ids[(i*batch+j)%len(ids)])
		}
		res, err := s.Take(ctx, takes)
		if err != nil {
			b.Fatal(err)
		}
		if !res[0].Allowed {
			b.Fatalf("decision %d denied: %+v", i, res[0])
		}
		i++
	}
	rt.Report(b, 1)
	if batch > 1 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/check")
	}
}

// BenchmarkRoundTripPing is the floor under every decision: one PING, the
// cheapest round trip to the same Redis through the same client.
func BenchmarkRoundTripPing(b *testing.B) {
	_, rt, rdb := redistest.Store(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if i == 0 {
			rt.Reset()
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		i++
	}
	rt.Report(b, 1)
}

// BenchmarkTakeTokenBucket is one /limits/check token-bucket decision: one
// EVALSHA of the token bucket script in one round trip.
func BenchmarkTakeTokenBucket(b *testing.B) { benchTake(b, bigBucket, 1) }

// BenchmarkTakeFixedWindow is one fixed-window decision: MULTI INCRBY +
// PEXPIRE NX + PTTL EXEC in one round trip.
func BenchmarkTakeFixedWindow(b *testing.B) { benchTake(b, bigWindow, 1) }

// BenchmarkTakeBatch10 is a /limits/check batch of 10 token-bucket checks
// on 10 keys: still one round trip.
func BenchmarkTakeBatch10(b *testing.B) { benchTake(b, bigBucket, 10) }

// BenchmarkTakeBatch10Mixed is a batch of 5 token buckets and 5 fixed
// windows: still one round trip.
func BenchmarkTakeBatch10Mixed(b *testing.B) {
	benchTake(b, func(id string) limit.Take {
		if id[len(id)-1]%2 == 0 {
			return bigBucket(id)
		}
		return bigWindow(id)
	}, 10)
}

// BenchmarkTakeTokenBucketParallel is BenchmarkTakeTokenBucket from
// GOMAXPROCS goroutines (times -cpu, or b.SetParallelism) sharing one
// client and its pool, as the HTTP handlers of one instance do.
func BenchmarkTakeTokenBucketParallel(b *testing.B) {
	s, rt, _ := redistest.Store(b)
	ids := benchIDs()
	var next atomic.Int64
	b.SetParallelism(8) // 8 goroutines per CPU: Redis round trips wait, they do not compute
	b.ResetTimer()
	rt.Reset()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			i := next.Add(1)
			res, err := s.Take(ctx, []limit.Take{bigBucket(ids[i%int64(len(ids))])})
			if err != nil {
				b.Error(err)
				return
			}
			if !res[0].Allowed {
				b.Errorf("decision %d denied: %+v", i, res[0])
				return
			}
		}
	})
	rt.Report(b, 1)
}
