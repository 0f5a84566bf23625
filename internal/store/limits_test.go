package store_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The /limits/check limits live many to a hash (limits.go). These tests
// hold the time-slice layout to the one key per limit that came before:
// the same decisions, step by step, across slice boundaries, on a clock
// driven by hand (miniredis's TIME and TTLs move only when told).

// limitPolicies are the takes the differential test draws from: buckets
// with whole and fractional refill intervals, a window that spends only
// when it allows and an Envoy rule's counting window.
func limitPolicies() []limit.Take {
	return []limit.Take{
		{Key: limit.Key{Space: "l:b"}, Algorithm: limit.TokenBucket, Limit: 5, Rate: 2},
		{Key: limit.Key{Space: "l:f"}, Algorithm: limit.TokenBucket, Limit: 3, Rate: 3}, // 333333.333 µs a token
		{Key: limit.Key{Space: "l:w"}, Algorithm: limit.FixedWindow, Limit: 4, Window: 3 * time.Second, SpendIfAllowed: true},
		{Key: limit.Key{Space: "l:c"}, Algorithm: limit.FixedWindow, Limit: 3, Window: 1500 * time.Millisecond, Independent: true},
	}
}

// named is tk on a key of its own (a Name: the layout before), which the
// store keeps as one key with a TTL.
func named(tk limit.Take) limit.Take {
	tk.Key.Name = "x"
	return tk
}

// TestLimitsDecideAsOneKeyPerLimit: 3,000 random steps (a take, a peek,
// a batch, a refund, the clock moving 0 to 1.5 s or jumping 6 s) give the
// same results on the time-slice hashes as on one key per limit, slice
// boundaries and hashes that expired included.
func TestLimitsDecideAsOneKeyPerLimit(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // far from this host's clock: every slice is named again once
	m.SetTime(now)
	rdb := redistest.Client(t, "redis://"+m.Addr())
	st := store.NewRedis(rdb, "og:").WithLimitShards(4) // few shards: limits share hashes
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(26, 1))
	pols, ids := limitPolicies(), []string{"a", "b", "c", "user:1000123", "session:0123456789abcdef0123456789abcdef"}
	draw := func() limit.Take {
		tk := pols[rng.IntN(len(pols))]
		tk.Key.ID = ids[rng.IntN(len(ids))]
		tk.Cost = int64(rng.IntN(3))
		return tk
	}
	both := func(step int, takes []limit.Take) {
		t.Helper()
		old := make([]limit.Take, len(takes))
		for i, tk := range takes {
			old[i] = named(tk)
		}
		want, err := st.Take(ctx, old)
		if err != nil {
			t.Fatalf("step %d: one key per limit: %v", step, err)
		}
		got, err := st.Take(ctx, takes)
		if err != nil {
			t.Fatalf("step %d: hashes: %v", step, err)
		}
		for i := range takes {
			if got[i] != want[i] {
				t.Fatalf("step %d, take %d (%s %s cost %d): hashes %+v, one key %+v", step, i, takes[i].Key.Space, takes[i].Key.ID, takes[i].Cost, got[i], want[i])
			}
		}
		if rng.IntN(5) == 0 { // give back what was spent
			var back, backOld []limit.Take
			for i := range takes {
				if got[i].Spent && !takes[i].Independent {
					back, backOld = append(back, takes[i]), append(backOld, old[i])
				}
			}
			if len(back) > 0 {
				if err := st.Refund(ctx, backOld); err != nil {
					t.Fatal(err)
				}
				if err := st.Refund(ctx, back); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for step := range 3000 {
		d := time.Duration(rng.IntN(1500)) * time.Millisecond
		if rng.IntN(50) == 0 {
			d = 6 * time.Second
		}
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
		switch rng.IntN(4) {
		case 0: // a batch of the buckets and the window, all or nothing
			var batch []limit.Take
			for range 1 + rng.IntN(3) {
				tk := draw()
				if tk.Independent {
					continue
				}
				tk.AllOrNothing = true
				batch = append(batch, tk)
			}
			if len(batch) > 1 {
				both(step, batch)
			}
		default:
			both(step, []limit.Take{draw()})
		}
	}
}

// TestLimitsGoAwayUntouched: a limit nobody touches again is gone, its
// hash too, within two slices of its last touch; one that is touched
// moves to the current slice and leaves nothing behind in the one before.
func TestLimitsGoAwayUntouched(t *testing.T) {
	m := miniredis.RunT(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	rdb := redistest.Client(t, "redis://"+m.Addr())
	st := store.NewRedis(rdb, "og:")
	ctx := context.Background()
	advance := func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
	// A bucket of 10 refilling 1/s: a slice of 10 s.
	bucket := limit.Take{Key: limit.Key{Space: "l:api", ID: "user:1"}, Algorithm: limit.TokenBucket, Limit: 10, Rate: 1, Cost: 5}
	idle := bucket
	idle.Key.ID = "user:2"
	if _, err := st.Take(ctx, []limit.Take{bucket, idle}); err != nil {
		t.Fatal(err)
	}
	fields := func() (n int) {
		for _, k := range m.Keys() {
			f, _ := m.HKeys(k)
			n += len(f)
		}
		return n
	}
	if n := fields(); n != 2 {
		t.Fatalf("%d limits stored, want 2", n)
	}
	for range 4 { // 4 x 4 s: user:1 is touched, user:2 is not
		advance(4 * time.Second)
		if _, err := st.Take(ctx, []limit.Take{bucket}); err != nil {
			t.Fatal(err)
		}
		if n := fields(); n > 2 {
			t.Fatalf("%d limits stored after a move, want at most 2 (a moved bucket leaves nothing behind)", n)
		}
	}
	// 16 s after its last touch user:2's bucket would be full: the field may
	// linger until its hash's end, at most 2 slices (20 s) after it.
	advance(4 * time.Second)
	cur, prev, field := st.LimitHashesForTest(idle)
	if m.Exists(cur) && m.HGet(cur, field) != "" || m.Exists(prev) && m.HGet(prev, field) != "" {
		t.Errorf("user:2's bucket is still stored 20 s (two slices) after its last touch")
	}
	advance(30 * time.Second)
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("keys left 30 s after every limit was full: %v", keys)
	}
}

// TestLimitsFollowRedisClock: a store whose idea of Redis's clock is an
// hour off names the wrong slices; the script writes nothing and says so,
// and the store names them again: one extra round trip, once, and the
// decisions are exact (a window of 3 allows exactly 3).
func TestLimitsFollowRedisClock(t *testing.T) {
	tg := redistest.New(t)
	rdb := redistest.Client(t, tg.URL)
	h := &redistest.RoundTrips{}
	rdb.AddHook(h)
	st := store.NewRedis(rdb, tg.Prefix)
	if err := st.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.SetSkewForTest(-time.Hour.Milliseconds())
	w := limit.Take{Key: limit.Key{Space: "l:w", ID: "k"}, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, Cost: 1, SpendIfAllowed: true}
	allowed := 0
	for i := range 5 {
		h.Reset()
		res := take1(t, st, w)
		if res.Allowed {
			allowed++
		}
		want := int64(1)
		if i == 0 {
			want = 2 // named again once, from the time the script returned
		}
		if got := h.N(); got != want {
			t.Errorf("take %d: %d round trips, want %d", i, got, want)
		}
	}
	if allowed != 3 {
		t.Errorf("allowed %d of a window of 3", allowed)
	}
}

// TestLimitSyncDebtOfOne: a sync that leaves a bucket one token in debt
// replies remaining -1, which must read as the answer (once), not as the
// scripts' "another slice" reply.
func TestLimitSyncDebtOfOne(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st := store.NewRedis(redistest.Client(t, "redis://"+m.Addr()), "og:")
	b := limit.Take{Key: limit.Key{Space: "l:api", ID: "hot"}, Algorithm: limit.TokenBucket, Limit: 10, Rate: 1}
	got, err := st.Sync(context.Background(), []limit.SyncItem{{Take: b, Delta: 11}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != -1 || got[0].ResetAfter != 11*time.Second {
		t.Errorf("after 11 tokens from a bucket of 10: %+v, want remaining -1, reset 11s", got[0])
	}
}
