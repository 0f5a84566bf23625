package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// limit takes, as /limits/check makes them (limit.Policy's take): a window
// spends only if it allows, and a batch is all or nothing.
func lfw(id string, limit, cost int64) limit.Take {
	t := fw(id, limit, time.Minute, cost)
	t.SpendIfAllowed, t.AllOrNothing = true, true
	return t
}

func ltb(id string, capacity int64, rate float64, cost int64) limit.Take {
	t := tb(id, capacity, rate, cost)
	t.AllOrNothing = true
	return t
}

func takeAll(t *testing.T, s *store.Redis, takes ...limit.Take) []limit.Result {
	t.Helper()
	res, err := s.Counters.Take(context.Background(), takes)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res
}

// TestTakeManyMatchesSingleScripts holds takeManyScript's arithmetic to
// the single-check scripts': on a frozen clock, the same sequence of takes
// on two buckets (or windows), one decided alone, one inside a batch, must
// give the same answers to the microsecond. If one script's rounding
// changes, so must the other's.
func TestTakeManyMatchesSingleScripts(t *testing.T) {
	b := backends(t)["miniredis"](t)
	clock := time.Now()
	b.mini.SetTime(clock)
	s := store.NewRedis(b.rdb, b.prefix)
	costs := []int64{1, 2, 0, 5, 1, 3, 0, 7, 1, 1, 4}
	for _, capacity := range []int64{5, 10, 100} {
		for _, rate := range []float64{0.01, 1, 3, 7, 33.3, 1000} {
			name := fmt.Sprintf("bucket %d at %v/s", capacity, rate)
			single, batched := name+" alone", name+" batched"
			for i, cost := range costs {
				cost = min(cost, capacity)
				alone := takeAll(t, s, ltb(single, capacity, rate, cost))[0]
				// A peek of another window makes it a batch.
				got := takeAll(t, s, ltb(batched, capacity, rate, cost), lfw("other", 5, 0))[0]
				if diff := cmp.Diff(alone, got); diff != "" {
					t.Fatalf("%s, take %d (cost %d): batched differs from alone (-alone +batched):\n%s", name, i, cost, diff)
				}
				clock = clock.Add(137 * time.Millisecond)
				b.mini.FastForward(137 * time.Millisecond)
				b.mini.SetTime(clock)
			}
		}
	}
	for _, limit := range []int64{1, 3, 10} {
		name := fmt.Sprintf("window %d", limit)
		for i, cost := range costs {
			cost = min(cost, limit)
			alone := takeAll(t, s, lfw(name+" alone", limit, cost))[0]
			got := takeAll(t, s, lfw(name+" batched", limit, cost), lfw("other", 5, 0))[0]
			if diff := cmp.Diff(alone, got); diff != "" {
				t.Fatalf("%s, take %d (cost %d): batched differs from alone (-alone +batched):\n%s", name, i, cost, diff)
			}
		}
	}
}

// TestBatchAllOrNothingInOneStep: the checks of a batch on one server are
// decided in one script call that spends nothing when one denies: no
// refund, one round trip.
func TestBatchAllOrNothingInOneStep(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			if b.mini != nil {
				b.mini.SetTime(time.Now())
			}
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			h := &redistest.RoundTrips{}
			b.rdb.AddHook(h)
			peek := func(id string) (win, bucket int64) {
				t.Helper()
				r := takeAll(t, s, lfw(id, 5, 0), ltb(id, 5, 0.01, 0))
				return r[0].Remaining, r[1].Remaining
			}

			// Allowed whole: both spend, in one script call.
			h.Reset()
			r := takeAll(t, s, lfw("a", 5, 2), ltb("a", 5, 0.01, 3))
			if !r[0].Allowed || !r[0].Spent || r[0].Remaining != 3 || !r[1].Allowed || !r[1].Spent || r[1].Remaining != 2 {
				t.Fatalf("allowed batch: %+v", r)
			}
			if h.N() != 1 {
				t.Errorf("allowed batch: %d round trips, want 1", h.N())
			}
			if r[0].ResetAfter <= 0 || r[0].ResetAfter > time.Minute {
				t.Errorf("window started by the batch: reset after %v, want (0, 1m]", r[0].ResetAfter)
			}

			// Denied by the bucket: the window's allowed hit is not spent.
			h.Reset()
			r = takeAll(t, s, lfw("a", 5, 1), ltb("a", 5, 0.01, 3))
			if !r[0].Allowed || r[0].Spent || r[1].Allowed || r[1].Spent {
				t.Fatalf("batch denied by its bucket: %+v, want the window allowed but unspent, the bucket denied", r)
			}
			if r[0].Remaining != 2 {
				t.Errorf("unspent window reports remaining %d, want 2 (as if spent, as the answer to the check)", r[0].Remaining)
			}
			if h.N() != 1 {
				t.Errorf("denied batch: %d round trips, want 1", h.N())
			}
			if w, bk := peek("a"); w != 3 || bk != 2 {
				t.Errorf("after the denied batch: window %d bucket %d left, want 3 and 2 (nothing spent)", w, bk)
			}

			// The same key twice: the second sees the first's spend.
			r = takeAll(t, s, lfw("b", 5, 3), lfw("b", 5, 3))
			if !r[0].Allowed || r[1].Allowed || r[0].Spent {
				t.Fatalf("3 then 3 of 5 in one batch: %+v, want allowed then denied, nothing spent", r)
			}
			r = takeAll(t, s, lfw("b", 5, 3), lfw("b", 5, 2))
			if !r[0].Spent || !r[1].Spent || r[1].Remaining != 0 {
				t.Fatalf("3 then 2 of 5 in one batch: %+v, want both spent, 0 left", r)
			}
			if w, _ := peek("b"); w != 0 {
				t.Errorf("window b: %d left, want 0", w)
			}

			// A shadow check's denial does not stop the others.
			sh := ltb("c", 1, 0.01, 2)
			sh.Shadow = true
			r = takeAll(t, s, lfw("c", 5, 1), sh)
			if !r[0].Spent || r[1].Allowed {
				t.Fatalf("batch with a denying shadow check: %+v, want the window spent", r)
			}

			// Held: decided, nothing written, a fresh key not created.
			held := []limit.Take{lfw("d", 5, 1), ltb("d", 5, 0.01, 1)}
			for i := range held {
				held[i].Hold = true
			}
			r = takeAll(t, s, held...)
			if !r[0].Allowed || r[0].Spent || !r[1].Allowed || r[1].Spent {
				t.Fatalf("held batch: %+v, want allowed, nothing spent", r)
			}
			r = takeAll(t, s, held[1])
			if !r[0].Allowed || r[0].Spent || r[0].Remaining != 4 {
				t.Fatalf("held single take: %+v, want allowed (4 left after it), unspent", r)
			}
			if n := b.rdb.Exists(ctx, b.prefix+"lim:t:{d}:fw", b.prefix+"lim:t:{d}:tb").Val(); n != 0 {
				t.Errorf("held takes created %d keys", n)
			}

			// Not all or nothing (a store caller other than /limits/check):
			// each allowed take spends.
			r = takeAll(t, s, tb("e", 2, 0.01, 1), tb("e", 2, 0.01, 2))
			if !r[0].Spent || r[1].Allowed {
				t.Fatalf("independent takes: %+v, want the first spent, the second denied", r)
			}
		})
	}
}

// TestBatchExactUnderConcurrency: concurrent all-or-nothing batches over
// two shared counters, against a real Redis: a bucket of 30 and a window
// of 40, each batch spending 1 from each. Exactly 30 batches are allowed,
// and the window counted exactly those.
func TestBatchExactUnderConcurrency(t *testing.T) {
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				r, err := s.Counters.Take(context.Background(), []limit.Take{lfw("x", 40, 1), ltb("x", 30, 0.001, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if r[0].Allowed && r[1].Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 30 {
		t.Errorf("%d of 160 batches allowed, want exactly 30 (the bucket)", allowed)
	}
	if n, err := b.rdb.Get(context.Background(), b.prefix+"lim:t:{x}:fw").Int64(); err != nil || n != 30 {
		t.Errorf("window counted %d (%v), want 30: a denied batch must spend nothing", n, err)
	}
}

// TestLimitChecksSendNoMulti: a /limits/check decision is one EVALSHA, no
// MULTI/EXEC, single or batched; an OTP send's window keeps its MULTI.
func TestLimitChecksSendNoMulti(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	s := store.NewRedis(rdb, "og:")
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.ConfigResetStat(ctx)
	takeAll(t, s, ltb("1", 5, 1, 1))
	takeAll(t, s, lfw("1", 5, 1))
	takeAll(t, s, lfw("2", 5, 1), ltb("2", 5, 1, 1))
	stats := commandStats(t, rdb)
	if stats["evalsha"].calls != 3 || stats["multi"].calls != 0 || stats["exec"].calls != 0 {
		t.Errorf("three checks sent %+v, want 3 evalsha and no multi/exec", stats)
	}
	rdb.ConfigResetStat(ctx)
	takeAll(t, s, fw("otp", 3, time.Minute, 1)) // counts every hit: MULTI INCRBY + PEXPIRE NX
	if st := commandStats(t, rdb); st["multi"].calls != 1 || st["exec"].calls != 1 || st["incrby"].calls != 1 || st["evalsha"].calls != 0 {
		t.Errorf("a counting window sent %+v, want one MULTI with its INCRBY", st)
	}
}

// TestScriptedTakesSurviveScriptFlush: the /limits/check scripts (one
// take, and a batch) run by EVAL when the server lost its script cache,
// and count once.
func TestScriptedTakesSurviveScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.URL())
	s := store.NewRedis(c, "p:")
	ctx := context.Background()
	for name, takes := range map[string][]limit.Take{
		"bucket": {ltb("b", 3, 1, 1)},
		"window": {lfw("w", 5, 1)},
		"batch":  {ltb("m", 3, 1, 1), lfw("m", 5, 1)},
	} {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i, r := range takeAll(t, s, takes...) {
			want := int64(2) // a bucket of 3
			if takes[i].Algorithm == limit.FixedWindow {
				want = 4 // a window of 5
			}
			if !r.Allowed || !r.Spent || r.Remaining != want {
				t.Errorf("%s, take %d after SCRIPT FLUSH: %+v, want allowed and spent with %d left (counted once)", name, i, r, want)
			}
		}
	}
}
