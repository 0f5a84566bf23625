package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The /limits/check calls that one coalesced pipeline carries go to Redis
// as one script call (merge.go). These tests hold the joined call to the
// calls one after another: decisions, round trips, script calls.

// holdGate holds a Coalescer's next pipeline on its way to the wire until
// released, so that a test can queue commands behind it in an order of its
// choosing; it records the commands of every pipeline that passes.
type holdGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}

	mu    sync.Mutex
	sizes []int // commands per pipeline, in order
}

func newHoldGate() *holdGate {
	return &holdGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *holdGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *holdGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *holdGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.mu.Lock()
		g.sizes = append(g.sizes, len(cmds))
		g.mu.Unlock()
		if g.armed.CompareAndSwap(true, false) {
			g.entered <- struct{}{}
			<-g.release
		}
		return next(ctx, cmds)
	}
}

// pipelines returns the sizes of the pipelines since the last call.
func (g *holdGate) pipelines() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sizes
	g.sizes = nil
	return s
}

// joinedClient is a client with a Coalescer of one pipeline on the wire
// and a holdGate inside it.
func joinedClient(t *testing.T, url string) (*redis.Client, *store.Coalescer, *holdGate) {
	t.Helper()
	rdb := redistest.Client(t, url)
	c, stop := store.Coalesce(rdb, store.CoalesceOptions{Pipelines: 1, Timeout: 5 * time.Second})
	g := newHoldGate()
	rdb.AddHook(g)
	t.Cleanup(stop)
	return rdb, c, g
}

type takeResult struct {
	res []limit.Result
	err error
}

// holdKey is the counter of the commands that hold pipelines.
const holdKey = "merge_test:hold"

// takeTogether runs each of reqs on its store (stores[i]) concurrently,
// queued in order behind a held pipeline, so that they go out together in
// the next one, in that order; it returns their results.
func takeTogether(t *testing.T, rdb *redis.Client, c *store.Coalescer, g *holdGate, stores []*store.Redis, reqs [][]limit.Take) []takeResult {
	t.Helper()
	ctx := context.Background()
	g.armed.Store(true)
	g.release = make(chan struct{})
	held := make(chan error, 1)
	go func() { held <- rdb.Incr(ctx, holdKey).Err() }()
	within(t, g.entered, "held pipeline")
	out := make([]takeResult, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { out[i].res, out[i].err = stores[i].Counters.Take(ctx, req) })
		waitQueued(t, c, i+1)
	}
	close(g.release)
	wg.Wait()
	if err := within(t, held, "reply of the held pipeline"); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJoinedCallsDecideAsSequential: 600 random steps, each of one to
// six concurrent requests (a check, a peek, an all-or-nothing batch, a
// held take) on limits that overlap, with refunds and a clock that moves
// across slices: a coalesced store, whose requests of a step go out as one
// joined script call, decides as a store that runs them one after another
// in the same order on another server at the same time, and leaves the
// same keys, fields and values in Redis.
func TestJoinedCallsDecideAsSequential(t *testing.T) {
	pols, ids := limitPolicies(), []string{"a", "b", "c", "user:1000123"}
	decidesAsSequential(t, 600, 1500*time.Millisecond, rand.New(rand.NewPCG(26, 2)), func(rng *rand.Rand) [][]limit.Take {
		draw := func() limit.Take {
			tk := pols[rng.IntN(len(pols))]
			tk.Key.ID = ids[rng.IntN(len(ids))]
			tk.Cost = int64(rng.IntN(3))
			return tk
		}
		reqs := make([][]limit.Take, 1+rng.IntN(6))
		for i := range reqs {
			if rng.IntN(3) > 0 {
				reqs[i] = []limit.Take{draw()} // a check (or a peek): take_limit, or take_limits for a peek
				continue
			}
			for range 1 + rng.IntN(3) {
				tk := draw()
				tk.AllOrNothing = !tk.Independent
				tk.Hold = rng.IntN(6) == 0
				reqs[i] = append(reqs[i], tk)
			}
		}
		return reqs
	})
}

// TestJoinedRunsDecideAsSequential is TestJoinedCallsDecideAsSequential
// for runs (one policy's checks in a row, lib/limit.lua's bump): 600 steps of
// two to eight checks of one window policy and one cost on a few ids, so
// that a run meets every state a window's field can be in: in cur or
// prev, running, ended in cur (l:s, a window shorter than its 1 s slice)
// or in prev, none, denied (l:s's cost 3 denies even a new window) or
// counted past its limit (l:c), and a count too large for a double
// ("count:start": l:h, whose cost is 2^40).
func TestJoinedRunsDecideAsSequential(t *testing.T) {
	pols := append(limitPolicies(),
		limit.Take{Key: limit.Key{Space: "l:h"}, Algorithm: limit.FixedWindow, Limit: 1 << 53, Window: 3 * time.Second, SpendIfAllowed: true},
		limit.Take{Key: limit.Key{Space: "l:s"}, Algorithm: limit.FixedWindow, Limit: 2, Window: 400 * time.Millisecond, SpendIfAllowed: true})
	windows := []limit.Take{pols[2], pols[3], pols[4], pols[5]}
	ids := []string{"a", "b", "c"}
	decidesAsSequential(t, 600, 600*time.Millisecond, rand.New(rand.NewPCG(26, 3)), func(rng *rand.Rand) [][]limit.Take {
		tk := windows[rng.IntN(len(windows))]
		tk.Cost = 1 + int64(rng.IntN(3))
		if tk.Key.Space == "l:h" {
			tk.Cost = 1 << 40
		}
		reqs := make([][]limit.Take, 2+rng.IntN(7))
		for i := range reqs {
			tk.Key.ID = ids[rng.IntN(len(ids))]
			reqs[i] = []limit.Take{tk}
		}
		return reqs
	})
}

// TestJoinedRunAfterRefundToNothing: a window that started on its
// slice's first ms and was refunded to no events is kept as "0:0", not 0
// (which a run's HINCRBY would take for no field): the next check in a run
// counts it in the window that runs, not in a new one.
func TestJoinedRunAfterRefundToNothing(t *testing.T) {
	m := miniredis.RunT(t)
	tk := limit.Take{Key: limit.Key{Space: "l:w"}, Algorithm: limit.FixedWindow, Limit: 4, Window: 3 * time.Second, Cost: 1, SpendIfAllowed: true}
	start := time.UnixMilli(1_900_000_000_000 / 3000 * 3000) // a slice's first ms
	m.SetTime(start)
	rdb, c, g := joinedClient(t, "redis://"+m.Addr())
	st := store.NewRedis(rdb, "og:").WithLimitShards(4)
	ctx := context.Background()
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(at time.Duration) []takeResult {
		m.SetTime(start.Add(at))
		st.Counters.SetSkewForTest(start.Add(at).UnixMilli() - time.Now().UnixMilli())
		a, b := tk, tk
		a.Key.ID, b.Key.ID = "a", "b"
		return takeTogether(t, rdb, c, g, []*store.Redis{st, st}, [][]limit.Take{{a}, {b}})
	}
	first := run(0)
	if err := st.Counters.Refund(ctx, []limit.Take{{Key: limit.Key{Space: "l:w", ID: "a"}, Algorithm: limit.FixedWindow, Limit: 4, Window: 3 * time.Second, Cost: 1}}); err != nil || first[0].err != nil {
		t.Fatal(err, first[0].err)
	}
	got := run(time.Second)
	if got[0].err != nil {
		t.Fatal(got[0].err)
	}
	if r := got[0].res[0]; r.Count != 1 || r.ResetAfter != 2*time.Second {
		t.Fatalf("check after the refund: %+v; want count 1 in the window that started a second ago (2 s left)", r)
	}
}

// TestJoinedRunOnRedis: on a real Redis (whose Lua is not miniredis's),
// runs of two checks on one window walk it from no field, through hits
// that HINCRBY adds to, past the count a double holds exactly (the field
// becomes "count:start", which HINCRBY refuses, and the run reads it
// again), to a denial that must leave it as it was: each count is exact.
func TestJoinedRunOnRedis(t *testing.T) {
	tr := redistest.New(t)
	rdb, c, g := joinedClient(t, tr.URL)
	st := store.NewRedis(rdb, tr.Prefix)
	if err := st.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	const cost = 1 << 36 // 2^53 / 60,000 (the slice, ms) is about 2.2 hits
	tk := limit.Take{Key: limit.Key{Space: "l:h", ID: "k"}, Algorithm: limit.FixedWindow, Limit: 7 * cost, Window: time.Minute, Cost: cost, SpendIfAllowed: true}
	for i := int64(1); i <= 4; i++ {
		got := takeTogether(t, rdb, c, g, []*store.Redis{st, st}, [][]limit.Take{{tk}, {tk}})
		for k, r := range got {
			hit := 2*(i-1) + int64(k) + 1
			allowed, want := hit <= 7, min(hit, 7)*cost // the 8th is denied and counts nothing
			if r.err != nil || r.res[0].Allowed != allowed || r.res[0].Count != want {
				t.Fatalf("run %d, check %d: %+v, %v; want allowed %v, count %d", i, k, r.res, r.err, allowed, want)
			}
		}
	}
}

// decidesAsSequential runs steps of requests (one step's from next, the
// clock moved up to maxStep before it, or now and then 6 s) on a
// coalesced store, each step's concurrently in one joined call, and on a
// store that runs them one after another on another server at the same
// time, with refunds after some and a clock that moves across the
// limits' slices: each request must get the same results from both, and after
// each step the two servers must hold the same keys, fields and values.
func decidesAsSequential(t *testing.T, steps int, maxStep time.Duration, rng *rand.Rand, next func(*rand.Rand) [][]limit.Take) {
	t.Helper()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mj, ms := miniredis.RunT(t), miniredis.RunT(t)
	setTime := func(d time.Duration) {
		now = now.Add(d)
		for _, m := range []*miniredis.Miniredis{mj, ms} {
			m.SetTime(now)
			m.FastForward(d)
		}
	}
	setTime(0)
	rdb, c, g := joinedClient(t, "redis://"+mj.Addr())
	joined := store.NewRedis(rdb, "og:").WithLimitShards(4)
	seq := store.NewRedis(redistest.Client(t, "redis://"+ms.Addr()), "og:").WithLimitShards(4)
	ctx := context.Background()
	// Both stores read the clock miniredis is held at: however long a
	// step takes on a loaded machine, no call names a slice Redis is not
	// in, and none is retried on its own.
	var nowMs atomic.Int64
	nowMs.Store(now.UnixMilli())
	for _, s := range []*store.Redis{joined, seq} {
		s.Counters.SetClockForTest(nowMs.Load)
		if err := s.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for step := range steps {
		d := time.Duration(rng.Int64N(int64(maxStep)/1e6)) * time.Millisecond
		if rng.IntN(50) == 0 {
			d = 6 * time.Second
		}
		setTime(d)
		nowMs.Store(now.UnixMilli())
		reqs := next(rng)
		stores := make([]*store.Redis, len(reqs))
		for i := range reqs {
			stores[i] = joined
		}
		g.pipelines()
		got := takeTogether(t, rdb, c, g, stores, reqs)
		if sizes := g.pipelines(); len(sizes) != 2 || sizes[1] > 1 && len(reqs) > 1 {
			t.Fatalf("step %d: pipelines of %v commands for %d requests, want the held one and one of a single joined call", step, sizes, len(reqs))
		}
		for i, req := range reqs {
			want, err := seq.Counters.Take(ctx, req)
			if err != nil || got[i].err != nil {
				t.Fatalf("step %d, request %d: sequential: %v, joined: %v", step, i, err, got[i].err)
			}
			for k := range req {
				if got[i].res[k] != want[k] {
					t.Fatalf("step %d, request %d, take %d (%s %s cost %d): joined %+v, sequential %+v", step, i, k, req[k].Key.Space, req[k].Key.ID, req[k].Cost, got[i].res[k], want[k])
				}
			}
		}
		// Refunds after the step's requests: on the joined store they
		// could not come between them.
		for i, req := range reqs {
			if rng.IntN(5) == 0 {
				refundSpent(t, []*store.Redis{joined, seq}, req, got[i].res)
			}
		}
		mj.Del(holdKey)
		if a, b := mj.Dump(), ms.Dump(); a != b {
			t.Fatalf("step %d: Redis holds, joined:\n%s\nsequential:\n%s", step, a, b)
		}
	}
}

// refundSpent gives back, on each store, what res says req spent.
func refundSpent(t *testing.T, stores []*store.Redis, req []limit.Take, res []limit.Result) {
	t.Helper()
	var back []limit.Take
	for i := range req {
		if res[i].Spent && !req[i].Independent {
			back = append(back, req[i])
		}
	}
	if len(back) == 0 {
		return
	}
	for _, s := range stores {
		if err := s.Counters.Refund(context.Background(), back); err != nil {
			t.Fatal(err)
		}
	}
}

// checkOf is a one-limit check of a window of limit on id (take_limit).
func checkOf(id string, lim int64) []limit.Take {
	return []limit.Take{{Key: limit.Key{Space: "l:w", ID: id}, Algorithm: limit.FixedWindow, Limit: lim, Window: time.Minute, Cost: 1, SpendIfAllowed: true}}
}

// batchOf is an all-or-nothing batch of a bucket and a window on id
// (take_limits).
func batchOf(id string) []limit.Take {
	return []limit.Take{
		{Key: limit.Key{Space: "l:b", ID: id}, Algorithm: limit.TokenBucket, Limit: 100, Rate: 0.001, Cost: 1, AllOrNothing: true},
		{Key: limit.Key{Space: "l:w", ID: id}, Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute, Cost: 1, SpendIfAllowed: true, AllOrNothing: true},
	}
}

// TestJoinedCallIsOneScriptCall: twenty concurrent requests (checks and
// batches) that share a pipeline are one EVALSHA on the server (INFO
// commandstats of a private Redis), and each gets its own answer. After
// SCRIPT FLUSH the joined call finds no script: each request runs its own
// by EVAL, counted once, and the next pipeline is one EVALSHA again.
func TestJoinedCallIsOneScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c, g := joinedClient(t, srv.URL())
	st := store.NewRedis(rdb, redistest.Prefix())
	ctx := context.Background()
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	stores := make([]*store.Redis, 20)
	reqs := make([][]limit.Take, 20)
	for i := range reqs {
		stores[i], reqs[i] = st, checkOf("k", 15) // 15 of the 20 (10 checks, 10 batches) allowed
		if i%2 == 1 {
			reqs[i] = append(batchOf(fmt.Sprint("b", i)), checkOf("k", 15)[0])
		}
	}
	for _, flush := range []bool{false, true, false} {
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		prefix := redistest.Prefix()
		st := store.NewRedis(rdb, prefix)
		for i := range stores {
			stores[i] = st
		}
		allowed := 0
		for i, r := range takeTogether(t, rdb, c, g, stores, reqs) {
			if r.err != nil {
				t.Fatalf("flush %v, request %d: %v", flush, i, r.err)
			}
			if r.res[len(r.res)-1].Allowed {
				allowed++
			}
		}
		if allowed != 15 {
			t.Errorf("flush %v: %d of 20 requests allowed by a window of 15", flush, allowed)
		}
		stats := commandStats(t, rdb)
		// One EVALSHA: the joined call (after the flush, its NOSCRIPT).
		if flush {
			if stats["eval"].calls != 20 {
				t.Errorf("after SCRIPT FLUSH: %d EVALs, want 20 (each request's own script)", stats["eval"].calls)
			}
		}
		if stats["evalsha"].calls != 1 {
			t.Errorf("flush %v: %d EVALSHA for 20 requests in one pipeline, want 1", flush, stats["evalsha"].calls)
		}
	}
}

// TestJoinedStaleGroupIsRetriedAlone: of two requests joined in one call,
// the one whose store names the wrong slices (its idea of Redis's clock an
// hour off) writes nothing and is named again alone, in a pipeline of its
// own; the other is decided in the joined call. Both count once.
func TestJoinedStaleGroupIsRetriedAlone(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c, g := joinedClient(t, srv.URL())
	prefix := redistest.Prefix()
	stale, good := store.NewRedis(rdb, prefix), store.NewRedis(rdb, prefix)
	ctx := context.Background()
	if err := good.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	stale.Counters.SetSkewForTest(-time.Hour.Milliseconds())
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g.pipelines()
	out := takeTogether(t, rdb, c, g, []*store.Redis{stale, good}, [][]limit.Take{checkOf("s", 1), batchOf("g")})
	for i, r := range out {
		if r.err != nil || !r.res[0].Allowed || r.res[0].Count != 1 && r.res[0].Remaining != 99 {
			t.Errorf("request %d: %+v, %v: want allowed, counted once", i, r.res, r.err)
		}
	}
	if sizes := g.pipelines(); len(sizes) != 3 || sizes[1] != 1 || sizes[2] != 1 {
		t.Errorf("pipelines of %v commands, want the held one, the joined call, the stale request's own retry", sizes)
	}
	if n := commandStats(t, rdb)["evalsha"].calls; n != 2 {
		t.Errorf("%d EVALSHA, want 2 (joined, then the retry)", n)
	}
	if again := take1(t, stale, checkOf("s", 1)[0]); again.Allowed {
		t.Errorf("the stale store's window of 1 allowed a second take: its retry counted twice or its stale call wrote")
	}
}

// TestJoinedCallsExactUnderConcurrency: two coalesced clients (two
// otpguard instances), 16 goroutines each, 400 checks of a window of 150
// and 400 batches on a bucket of 120: exactly 150 and 120 allowed, though
// the calls were joined many to a script call.
func TestJoinedCallsExactUnderConcurrency(t *testing.T) {
	tg := redistest.New(t)
	ctx := context.Background()
	var stores []*store.Redis
	for range 2 {
		rdb := redistest.Client(t, tg.URL)
		_, stop := store.Coalesce(rdb, store.CoalesceOptions{Pipelines: 1, Timeout: 5 * time.Second})
		t.Cleanup(stop)
		stores = append(stores, store.NewRedis(rdb, tg.Prefix))
	}
	if err := stores[0].LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	bucket := limit.Take{Key: limit.Key{Space: "l:b", ID: "hot"}, Algorithm: limit.TokenBucket, Limit: 120, Rate: 0.001, Cost: 1, AllOrNothing: true}
	peek := limit.Take{Key: limit.Key{Space: "l:w", ID: "other"}, Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute, AllOrNothing: true}
	var windows, buckets atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		st := stores[w%2]
		wg.Go(func() {
			for range 25 {
				if r, err := st.Counters.Take(ctx, checkOf("hot", 150)); err != nil {
					t.Error(err)
				} else if r[0].Allowed {
					windows.Add(1)
				}
				if r, err := st.Counters.Take(ctx, []limit.Take{bucket, peek}); err != nil {
					t.Error(err)
				} else if r[0].Allowed {
					buckets.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if windows.Load() != 150 || buckets.Load() != 120 {
		t.Errorf("allowed %d of a window of 150 and %d of a bucket of 120 (800 tries each)", windows.Load(), buckets.Load())
	}
}

// TestClusterCallsAreNotJoined: on Redis Cluster (or a Ring) the calls of
// different requests are in different slots, and one script call cannot
// span them; on a single Redis and Sentinel's master they are joined.
func TestClusterCallsAreNotJoined(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if store.JoinsOnForTest(cc) {
		t.Error("a Cluster client's Coalescer joins script calls")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if store.JoinsOnForTest(ring) {
		t.Error("a Ring client's Coalescer joins script calls")
	}
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	if !store.JoinsOnForTest(failover) {
		t.Error("a Sentinel client's Coalescer does not join script calls")
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	if !store.JoinsOnForTest(single) {
		t.Error("a single-node client's Coalescer does not join script calls")
	}
}

// TestJoinedRunFailureStopsOnlyItsCall: three checks of one policy in one
// pipeline go as one run of the joined call (take_limits_many.lua, tag
// 3); the middle one's hash is not a hash (WRONGTYPE): that request alone
// gets the error, the two around it are decided and counted.
func TestJoinedRunFailureStopsOnlyItsCall(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c, g := joinedClient(t, srv.URL())
	st := store.NewRedis(rdb, redistest.Prefix()).WithLimitShards(3)
	ctx := context.Background()
	if err := st.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	// Three ids in three different shards, so that only the middle one
	// finds its hash broken.
	ids, tags := []string{}, map[string]bool{}
	for i := 0; len(ids) < 3; i++ {
		id := fmt.Sprint("run", i)
		if tag := st.Counters.LimitTagForTest(limit.Key{ID: id}); !tags[tag] {
			tags[tag] = true
			ids = append(ids, id)
		}
	}
	cur, _, _ := st.Counters.LimitHashesForTest(checkOf(ids[1], 5)[0])
	if err := rdb.Set(ctx, cur, "not a hash", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := [][]limit.Take{checkOf(ids[0], 5), checkOf(ids[1], 5), checkOf(ids[2], 5)}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got := takeTogether(t, rdb, c, g, []*store.Redis{st, st, st}, reqs)
	if n := commandStats(t, rdb)["evalsha"].calls; n != 1 {
		t.Errorf("%d EVALSHA for three checks in one pipeline, want 1", n)
	}
	if got[1].err == nil || !strings.Contains(got[1].err.Error(), "WRONGTYPE") {
		t.Errorf("the check on a broken hash: %v, want its WRONGTYPE error", got[1].err)
	}
	for _, i := range []int{0, 2} {
		if got[i].err != nil || !got[i].res[0].Allowed || got[i].res[0].Count != 1 {
			t.Errorf("check %d beside the broken one: %+v, %v; want allowed, count 1", i, got[i].res, got[i].err)
		}
	}
	if again := take1(t, st, checkOf(ids[2], 5)[0]); again.Count != 2 {
		t.Errorf("the third check's window counts %d after a second hit, want 2 (the run wrote it once)", again.Count)
	}
}

// TestJoinedStaleRunIsRetried: two checks of one policy from a store that
// names the wrong slices go as one run of the joined call; the run writes
// nothing and answers each its stale reply, so each is named again and
// counted once.
func TestJoinedStaleRunIsRetried(t *testing.T) {
	srv := redistest.Start(t)
	rdb, c, g := joinedClient(t, srv.URL())
	prefix := redistest.Prefix()
	stale, good := store.NewRedis(rdb, prefix), store.NewRedis(rdb, prefix)
	if err := good.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	stale.Counters.SetSkewForTest(-time.Hour.Milliseconds())
	reqs := [][]limit.Take{checkOf("s", 1), checkOf("t", 1), checkOf("g", 1)}
	out := takeTogether(t, rdb, c, g, []*store.Redis{stale, stale, good}, reqs)
	for i, r := range out {
		if r.err != nil || !r.res[0].Allowed || r.res[0].Count != 1 {
			t.Errorf("request %d: %+v, %v: want allowed, counted once", i, r.res, r.err)
		}
	}
	for _, id := range []string{"s", "t", "g"} {
		if again := take1(t, good, checkOf(id, 1)[0]); again.Allowed {
			t.Errorf("window of 1 on %s allowed a second take: counted twice, or not at all", id)
		}
	}
}
