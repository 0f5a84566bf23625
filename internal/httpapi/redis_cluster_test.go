package httpapi_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestMain stops the Redis Cluster the tests share (started once, by the
// first test that needs it).
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

// onRedisCluster starts n instances on the shared 3-master Redis Cluster,
// each with its own cluster client, as otpguard connects in cluster mode.
func onRedisCluster(t *testing.T, n int, policies guard.Policies) *cluster {
	t.Helper()
	return onRedisClusterWith(t, n, policies, func(*config.Config) {})
}

// onRedisClusterWith is onRedisCluster with tune applied to the config.
func onRedisClusterWith(t *testing.T, n int, policies guard.Policies, tune func(*config.Config)) *cluster {
	t.Helper()
	rc := redistest.SharedCluster(t)
	cfg := testConfig(t, "", redistest.Prefix(), t.TempDir(), policies)
	cfg.Redis.Mode, cfg.Redis.Addrs = store.RedisCluster, rc.Addrs()
	tune(cfg)
	return newClusterConfig(t, n, cfg)
}

func TestOTPSendBurstIsExactOnRedisCluster(t *testing.T) { otpSendBurstIsExact(t, onRedisCluster) }

func TestLimitBurstIsExactOnRedisCluster(t *testing.T) { limitBurstIsExact(t, onRedisCluster) }

// TestCrossSlotBatchIsExactOnRedisCluster: concurrent batches whose three
// checks live on three masters. Each batch is all-or-nothing: exactly the
// 30 the fixed window allows pass, and the buckets spent by the refused
// batches are all given back.
func TestCrossSlotBatchIsExactOnRedisCluster(t *testing.T) {
	const instances, requests = 4, 200
	p := defaults()
	p.Limits = map[string]limit.Policy{
		"search": {Algorithm: limit.FixedWindow, Limit: 30, Window: time.Minute},
		"big":    {Algorithm: limit.TokenBucket, Capacity: 1000, RefillPerSecond: 0.001},
	}
	c := onRedisCluster(t, instances, p)
	k := redistest.OnMasters(t, c.instances[0].rdb.(*redis.ClusterClient), 3)
	batch := func(cost int) string {
		return fmt.Sprintf(`{"checks":[{"policy":"big","key":%q,"cost":%d},{"policy":"search","key":%q,"cost":%d},{"policy":"big","key":%q,"cost":%d}]}`,
			k[0], cost, k[1], cost, k[2], cost)
	}
	statuses := burst(t, c, requests, "/limits/check", func(int) string { return batch(1) })
	if statuses[200] != 30 || statuses[429] != requests-30 {
		t.Fatalf("statuses %v over %d instances, want exactly 30 x 200 and the rest 429", statuses, instances)
	}
	peek := c.do(t, 0, "POST", "/limits/check", batch(0))
	ds := peek.json(t)["decisions"].([]any)
	for i, want := range []float64{970, 0, 970} {
		if got := ds[i].(map[string]any)["remaining"]; got != want {
			t.Errorf("check %d (%s) remaining after the burst = %v, want %v: refused batches must spend nothing", i, k[i], got, want)
		}
	}
}

// TestCrossSlotBatchRoundTripsOnRedisCluster: a batch over three masters
// costs one round trip per master, sent concurrently, not one per check;
// and a refused one spends nothing.
func TestCrossSlotBatchRoundTripsOnRedisCluster(t *testing.T) {
	// Uncoalesced, so that each master's script call is a pipeline of its
	// own that the hook can count (coalesced, calls to several masters may
	// share one go-redis pipeline: coalesce_test.go covers that).
	c := onRedisClusterWith(t, 1, limitPolicies(), func(cfg *config.Config) { cfg.RedisPipelines = 0 })
	k := redistest.OnMasters(t, c.instances[0].rdb.(*redis.ClusterClient), 3)
	h := &redistest.RoundTrips{}
	c.instances[0].rdb.AddHook(h)
	var checks []string
	for i := range limit.MaxBatch {
		checks = append(checks, fmt.Sprintf(`{"policy":"api","key":%q}`, k[i%3]))
	}
	// Warm the connections and each master's script cache (the harness
	// does not preload scripts, as serve does): spends 1 of search.
	c.do(t, 0, "POST", "/limits/check", fmt.Sprintf(`{"checks":[{"policy":"api","key":%q,"cost":0},{"policy":"api","key":%q,"cost":0},{"policy":"search","key":%q},{"policy":"api","key":%q,"cost":0}]}`, k[0], k[1], k[1], k[2]))
	h.Reset()
	r := c.do(t, 0, "POST", "/limits/check", `{"checks":[`+strings.Join(checks, ",")+`]}`)
	if r.Status != 200 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	if got := h.N(); got != 3 {
		t.Errorf("a batch of %d checks over 3 masters took %d round trips, want 3 (one per master)", limit.MaxBatch, got)
	}

	// search has 29 left: a batch asking 30 of it on one master is refused,
	// and the api tokens it took on the two others are refunded.
	deny := fmt.Sprintf(`{"checks":[{"policy":"api","key":%q,"cost":5},{"policy":"search","key":%q,"cost":30},{"policy":"api","key":%q,"cost":5}]}`, k[0], k[1], k[2])
	if r := c.do(t, 0, "POST", "/limits/check", deny); r.Status != 429 {
		t.Fatalf("over-budget cross-slot batch: %d %s, want 429", r.Status, r.Body)
	}
	perKey := limit.MaxBatch / 3
	peek := c.do(t, 0, "POST", "/limits/check", fmt.Sprintf(`{"checks":[{"policy":"api","key":%q,"cost":0},{"policy":"search","key":%q,"cost":0},{"policy":"api","key":%q,"cost":0}]}`, k[0], k[1], k[2]))
	ds := peek.json(t)["decisions"].([]any)
	for i, want := range []float64{float64(50 - perKey - boolInt(limit.MaxBatch%3 > 0)), 29, float64(50 - perKey)} {
		if got := ds[i].(map[string]any)["remaining"]; got != want {
			t.Errorf("check %d remaining after the refused batch = %v, want %v (nothing spent)", i, got, want)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
