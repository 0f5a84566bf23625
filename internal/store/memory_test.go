package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// Bucket memory, measured as the issue asks: INFO memory's used_memory over
// 200,000 active buckets, otpguard's one-integer bucket against the common
// design, a hash {tokens, last} with a TTL, on the same key names. Each
// design gets its own private redis-server, started alike, so both start
// from the same empty baseline. used_memory is the allocator's own count
// (jemalloc usable sizes), not RSS: it does not depend on the clock or the
// machine's load, so the bound below can be asserted.
const (
	memBuckets = 200_000
	memChunk   = 500 // buckets per round trip while filling
	// maxBytesPerBucket is the target for otpguard's bucket.
	maxBytesPerBucket = 120
)

// memPolicy is a slow bucket (capacity 100, one token a minute), so that a
// bucket spent once lives for a minute: long enough that none expires
// while the others are being made, even under -race.
func memTake(id string) limit.Take {
	return limit.Take{Key: limit.Key{Space: "lim:api", ID: id, Name: "tb"}, Algorithm: limit.TokenBucket,
		Limit: 100, Rate: 1.0 / 60, Cost: 1}
}

func memID(i int) string { return "user:" + strconv.Itoa(100000+i) }

func TestBucketMemory(t *testing.T) {
	t.Parallel() // its own redis-servers: another test's keys never count
	if testing.Short() {
		t.Skip("fills 2 x 200,000 keys; skipped with -short")
	}
	ours := measureBuckets(t, "otpguard (one integer TAT)", fillOurs)
	hash := measureBuckets(t, "hash {tokens, last}", fillHash)

	t.Logf("bytes per active bucket over %d buckets: otpguard %.1f, hash {tokens,last} %.1f (%.0f%% of the hash)",
		memBuckets, ours, hash, 100*ours/hash)
	if ours > maxBytesPerBucket {
		// On Redis 7.0 with jemalloc a key with a TTL costs, before its
		// value: its name (32), two dict entries (24 bytes each, allocated
		// as 32) and two table slots (~21 at 200,000 keys) = 117. An integer
		// value adds a 16-byte object unless it is below 10,000 (a shared
		// integer, no allocation). See docs/benchmarks.md, "Memory".
		t.Errorf("otpguard bucket costs %.1f bytes of Redis memory, want at most %d", ours, maxBytesPerBucket)
	}
	if ours >= hash {
		t.Errorf("otpguard bucket costs %.1f bytes, the hash design %.1f: want less", ours, hash)
	}
}

// fillOurs makes n buckets through the real code path: store.Redis.Take,
// memChunk takes per call (one MULTI of EVALSHAs each).
func fillOurs(t *testing.T, rdb *redis.Client) {
	s := store.NewRedis(rdb, "og:")
	ctx := context.Background()
	takes := make([]limit.Take, 0, memChunk)
	for i := 0; i < memBuckets; i += memChunk {
		takes = takes[:0]
		for j := i; j < min(i+memChunk, memBuckets); j++ {
			takes = append(takes, memTake(memID(j)))
		}
		res, err := s.Take(ctx, takes)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if !r.Allowed {
				t.Fatalf("a fresh bucket denied: %+v", r)
			}
		}
	}
}

// fillHash makes n buckets the common way: HSET key tokens <n> last <µs>,
// then PEXPIRE to when the bucket would be full again, pipelined.
func fillHash(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	for i := 0; i < memBuckets; i += memChunk {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+memChunk, memBuckets); j++ {
			key := "og:lim:api:{" + memID(j) + "}:tb"
			pipe.HSet(ctx, key, "tokens", 99, "last", now+int64(j))
			pipe.PExpire(ctx, key, time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// measureBuckets starts a private Redis, fills it with fill and returns
// the growth of used_memory per bucket.
func measureBuckets(t *testing.T, name string, fill func(*testing.T, *redis.Client)) float64 {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	ctx := context.Background()
	// Scripts in the cache and the Lua VM warm before the baseline; a peek
	// (cost 0) writes nothing.
	s := store.NewRedis(rdb, "og:")
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	warm := memTake("warm-up")
	warm.Cost = 0
	if _, err := s.Take(ctx, []limit.Take{warm}); err != nil {
		t.Fatal(err)
	}

	before := settledMemory(t, rdb)
	start := time.Now()
	fill(t, rdb)
	filled := time.Since(start)
	after := settledMemory(t, rdb)

	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != memBuckets {
		t.Fatalf("%s: %d keys after the fill, want %d (did some expire?)", name, n, memBuckets)
	}
	sample := "og:lim:api:{" + memID(123456-100000) + "}:tb"
	usage, _ := rdb.MemoryUsage(ctx, sample).Result()
	typ, _ := rdb.ObjectEncoding(ctx, sample).Result()
	ttl, _ := rdb.PTTL(ctx, sample).Result()

	per := float64(after.used-before.used) / memBuckets
	t.Logf("%s: used_memory %d -> %d over %d buckets (filled in %s): %.1f bytes/bucket; client buffers %+d bytes; sample %s: encoding %s, MEMORY USAGE %d, ttl %s",
		name, before.used, after.used, memBuckets, filled.Round(time.Millisecond), per,
		after.clients-before.clients, sample, typ, usage, ttl.Round(time.Second))
	return per
}

type memInfo struct{ used, clients int64 }

// settledMemory reads INFO memory once the figure stops moving: Redis
// finishes growing its key tables incrementally (rehashing), and the old
// table is freed only when that is done.
func settledMemory(t *testing.T, rdb *redis.Client) memInfo {
	t.Helper()
	var last memInfo
	for i := 0; i < 50; i++ {
		m := readMemory(t, rdb)
		if i > 0 && m == last {
			return m
		}
		last = m
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func readMemory(t *testing.T, rdb *redis.Client) memInfo {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var m memInfo
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			m.used = mustInt(t, k, v)
		case "mem_clients_normal":
			m.clients = mustInt(t, k, v)
		}
	}
	if m.used == 0 {
		t.Fatalf("no used_memory in INFO memory: %q", info)
	}
	return m
}

func mustInt(t *testing.T, k, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("INFO memory %s=%q: %w", k, v, err))
	}
	return n
}
