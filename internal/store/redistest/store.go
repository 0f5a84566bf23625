package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
)

// Store returns a store on a real Redis (New) with its scripts loaded and
// a RoundTrips hook on its client. The client is built as otpguard builds
// it (no retries, context deadlines on), with a generous timeout so that a
// slow round trip on a busy machine is measured, not turned into an error.
func Store(tb testing.TB) (*store.Redis, *RoundTrips, *redis.Client) {
	tb.Helper()
	return StoreAt(tb, New(tb))
}

// StoreAt is Store on tg's Redis and key prefix: each call is one more
// instance's client, with its own RoundTrips, on the same keys.
func StoreAt(tb testing.TB, tg Target) (*store.Redis, *RoundTrips, *redis.Client) {
	tb.Helper()
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: tg.URL, Timeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	s := store.NewRedis(rdb, tg.Prefix)
	if err := s.LoadScripts(context.Background()); err != nil {
		tb.Fatal(err)
	}
	h := &RoundTrips{}
	rdb.AddHook(h)
	return s, h, rdb
}

// OnMasters returns n subject IDs ("s0", "s7", ...) whose hash tags live on
// n different masters of a cluster, for batches that must span nodes.
func OnMasters(tb testing.TB, rdb *redis.ClusterClient, n int) []string {
	tb.Helper()
	seen := map[string]bool{}
	var ids []string
	for i := 0; len(ids) < n && i < 1000; i++ {
		id := fmt.Sprintf("s%d", i)
		node, err := rdb.MasterForKey(context.Background(), "{"+id+"}")
		if err != nil {
			tb.Fatal(err)
		}
		if addr := node.Options().Addr; !seen[addr] {
			seen[addr] = true
			ids = append(ids, id)
		}
	}
	if len(ids) < n {
		tb.Fatalf("found subjects on %d masters, want %d", len(ids), n)
	}
	return ids
}

// ClusterStoreAt is a store on the Redis Cluster c with prefix, reached as
// otpguard reaches one (NewUniversalClient, mode cluster), with a
// RoundTrips hook: each call is one more instance's client on the same
// keys.
func ClusterStoreAt(tb testing.TB, c *Cluster, prefix string) (*store.Redis, *RoundTrips) {
	tb.Helper()
	u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: c.Addrs(), Timeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { u.Close() })
	h := &RoundTrips{}
	u.AddHook(h)
	return store.NewClusterRedis(u, prefix), h
}
