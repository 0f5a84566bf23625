package store_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
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

// clusterStore is a store over the shared cluster, reached as otpguard
// reaches it (NewUniversalClient, mode cluster), with a round-trip counter.
func clusterStore(t *testing.T) (*store.Redis, *redis.ClusterClient, *redistest.RoundTrips, string) {
	t.Helper()
	c := redistest.SharedCluster(t)
	u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: c.Addrs(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	rdb := u.(*redis.ClusterClient)
	h := &redistest.RoundTrips{}
	rdb.AddHook(h)
	prefix := redistest.Prefix()
	return store.NewClusterRedis(rdb, prefix), rdb, h, prefix
}

func TestSlotMatchesRedis(t *testing.T) {
	if got := store.Slot("123456789"); got != 0x31C3%16384 {
		t.Errorf("Slot(123456789) = %d, want %d (CRC16/XMODEM check value)", got, 0x31C3%16384)
	}
	_, rdb, _, _ := clusterStore(t)
	ctx := context.Background()
	keys := []string{"foo", "og:otp:{+919800000000}:sends", "og:{instances}", "og:ops:{blocks}:ends",
		"a{}b", "{}", "x{y", "x}y{z}", "og:lim:api:{user:42}:", "og:lim:api:{}{x}:", "\xff\x00{\xfe}"}
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("t:lim:api:{k%d}:", i))
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := store.Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// limitsOnMasters is n caller keys whose limits (their shard's hash tag)
// live on n different masters.
func limitsOnMasters(t *testing.T, st *store.Redis, rdb *redis.ClusterClient, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var ids []string
	for i := 0; len(ids) < n && i < 1000; i++ {
		id := fmt.Sprintf("s%d", i)
		node, err := rdb.MasterForKey(context.Background(), st.Counters.LimitTagForTest(limit.Key{Space: "lim:x", ID: id}))
		if err != nil {
			t.Fatal(err)
		}
		if addr := node.Options().Addr; !seen[addr] {
			seen[addr] = true
			ids = append(ids, id)
		}
	}
	if len(ids) < n {
		t.Fatalf("found limits on %d masters, want %d", len(ids), n)
	}
	return ids
}

// limitCount is a limit's count (a window's) or remaining (a bucket's),
// read by a peek through the store.
func limitCount(t *testing.T, st *store.Redis, tk limit.Take) int64 {
	t.Helper()
	tk.Cost = 0
	res, err := st.Counters.Take(context.Background(), []limit.Take{tk})
	if err != nil {
		t.Fatal(err)
	}
	if tk.Algorithm == limit.TokenBucket {
		return res[0].Remaining
	}
	return res[0].Count
}

func TestClusterTakeSpansSlots(t *testing.T) {
	st, rdb, h, _ := clusterStore(t)
	ctx := context.Background()
	ids := limitsOnMasters(t, st, rdb, 3)
	var takes []limit.Take
	for _, id := range ids {
		takes = append(takes,
			limit.Take{Key: limit.Key{Space: "lim:x", ID: id}, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, Cost: 1},
			limit.Take{Key: limit.Key{Space: "lim:y", ID: id}, Algorithm: limit.TokenBucket, Limit: 3, Rate: 0.01, Cost: 1})
	}
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 4; round++ {
		h.Reset()
		res, err := st.Counters.Take(ctx, takes)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := h.N(); got != int64(len(ids)) {
			t.Errorf("round %d: a batch over %d masters (one slot each) took %d round trips, want %d", round, len(ids), got, len(ids))
		}
		for i, r := range res {
			if want := round <= 3; r.Allowed != want || r.Limit != 3 {
				t.Errorf("round %d, take %d (%s): allowed %v limit %d, want allowed %v limit 3", round, i, takes[i].Key.ID, r.Allowed, r.Limit, want)
			}
		}
	}
	h.Reset()
	if err := st.Counters.Refund(ctx, takes); err != nil {
		t.Fatal(err)
	}
	if got := h.N(); got != int64(len(ids)) {
		t.Errorf("refund over %d masters took %d round trips, want %d", len(ids), got, len(ids))
	}
	for i, id := range ids {
		if n := limitCount(t, st, takes[2*i]); n != 3 {
			t.Errorf("window of %s after 4 takes and a refund: %d; want 3", id, n)
		}
	}
}

// TestClusterTakeIsExactUnderConcurrency: many clients, each its own
// cluster client, spend one batch spanning three masters; each counter
// ends exactly at the number of batches.
func TestClusterTakeIsExactUnderConcurrency(t *testing.T) {
	st, rdb, _, prefix := clusterStore(t)
	ids := limitsOnMasters(t, st, rdb, 3)
	const clients, batches = 4, 50
	stores := make([]*store.Redis, clients)
	for i := range stores {
		u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: redistest.SharedCluster(t).Addrs(), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		stores[i] = store.NewClusterRedis(u, prefix)
	}
	var takes []limit.Take
	for _, id := range ids {
		takes = append(takes, limit.Take{Key: limit.Key{Space: "lim:x", ID: id}, Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute, Cost: 1})
	}
	var wg sync.WaitGroup
	for i := range batches {
		wg.Go(func() {
			if _, err := stores[i%clients].Counters.Take(context.Background(), takes); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, id := range ids {
		if n := limitCount(t, st, takes[i]); n != batches {
			t.Errorf("counter %s = %d; want exactly %d", id, n, batches)
		}
	}
}

func TestCheckRedisVersionOnCluster(t *testing.T) {
	_, rdb, _, _ := clusterStore(t)
	if err := store.CheckRedisVersion(context.Background(), rdb); err != nil {
		t.Fatalf("CheckRedisVersion on the cluster: %v", err)
	}
}

// TestClusterBlocksAndUnblock: the block index lives in one slot
// ({blocks}); unblocking touches the number's slot and the index's, one
// MULTI each.
func TestClusterBlocksAndUnblock(t *testing.T) {
	st, rdb, _, prefix := clusterStore(t)
	ctx := context.Background()
	const phone = "+919800000077"
	counter := limit.Key{Space: "otp", ID: phone, Name: "sends"}
	take := limit.Take{Key: counter, Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute, Cost: 1}
	for range 2 {
		if _, err := st.Counters.Take(ctx, []limit.Take{take}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Blocks.NoteBlock(ctx, guard.Block{Phone: phone, Reason: problem.CodePhoneRateLimited, Count: 2, Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if bs, total, err := st.Blocks.ListBlocks(ctx, nil, 10); err != nil || total != 1 || len(bs) != 1 || bs[0].Phone != phone {
		t.Fatalf("ListBlocks = %v, %d, %v; want the one number", bs, total, err)
	}
	if err := st.Blocks.Unblock(ctx, phone, []limit.Key{counter}); err != nil {
		t.Fatalf("Unblock on the cluster: %v", err)
	}
	if bs, total, err := st.Blocks.ListBlocks(ctx, nil, 10); err != nil || total != 0 || len(bs) != 0 {
		t.Errorf("ListBlocks after Unblock = %v, %d, %v; want none", bs, total, err)
	}
	if n := rdb.Exists(ctx, prefix+"otp:{"+phone+"}:sends").Val(); n != 0 {
		t.Errorf("the number's counter survived Unblock")
	}
}

// TestClusterNoteBlockRefundVolume: on Redis Cluster a refused send's
// block note and velocity refund, whose keys are in different slots, go
// in one pipeline (go-redis sends each to its master) and both take
// effect.
func TestClusterNoteBlockRefundVolume(t *testing.T) {
	st, _, h, _ := clusterStore(t)
	ctx := context.Background()
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	vol := &guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"},
		Quarantine: limit.Key{Space: "otp:vel", ID: "GB", Name: "quarantine"},
		Now:        now, Hour: now.Unix() / 3600, Lookback: 24, Floor: 2, QFloor: 1, Factor: 3, HistoryMinSends: 200}
	for {
		r, err := st.Velocity.TakeVolume(ctx, *vol)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			break
		}
	}
	h.Reset()
	const phone = "+447400123401"
	if err := st.Blocks.NoteBlockRefundVolume(ctx, guard.Block{Phone: phone, Country: "GB", Reason: problem.CodeCooldown, Count: 1, Until: now.Add(time.Minute)},
		vol.Key, limit.Key{}, now); err != nil {
		t.Fatal(err)
	}
	if h.N() != 1 {
		t.Errorf("%d round trips, want 1 (one pipeline)", h.N())
	}
	blocks, _, err := st.Blocks.ListBlocks(ctx, func(p string) bool { return p == phone }, 10)
	if err != nil || len(blocks) != 1 {
		t.Errorf("block of %s: %v %v, want listed", phone, blocks, err)
	}
	if r, err := st.Velocity.TakeVolume(ctx, *vol); err != nil || !r.Allowed {
		t.Errorf("after the refund: %+v %v, want allowed", r, err)
	}
}
