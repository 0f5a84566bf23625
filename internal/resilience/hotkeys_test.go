package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// clock is the simulation's injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// flaky is the shared store, as a Syncer and a Counter, that can be
// switched off as a Redis that refuses connections: while down, nothing
// reaches Redis.
type flaky struct {
	st   *store.Redis
	down atomic.Bool
}

var errRefused = errors.New("connection refused")

func (f *flaky) Sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	if f.down.Load() {
		return nil, errRefused
	}
	return f.st.Sync(ctx, items)
}

func (f *flaky) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if f.down.Load() {
		return nil, errRefused
	}
	return f.st.Take(ctx, takes)
}

func (f *flaky) Refund(ctx context.Context, takes []limit.Take) error {
	if f.down.Load() {
		return errRefused
	}
	return f.st.Refund(ctx, takes)
}

// recorder is one instance's Syncer: it keeps what the instance's last
// successful sync read, the figure its share must come from.
type recorder struct {
	resilience.Syncer
	remaining int64
	syncs     int
}

func (r *recorder) Sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	st, err := r.Syncer.Sync(ctx, items)
	if err == nil {
		r.remaining, r.syncs = st[0].Remaining, r.syncs+1
	}
	return st, err
}

// sim runs N instances of one sync-mode policy, each a Limiter with its
// own hot keys, against one real Redis, on one injected clock. A check the
// hot keys hand back goes to Redis exactly (the flaky store, as a closed
// policy without the Fallback).
type sim struct {
	t      *testing.T
	clk    *clock
	store  *store.Redis
	rdb    *redis.Client
	prefix string
	flaky  *flaky
	hot    []*resilience.HotKeys
	lims   []*limit.Limiter
	recs   []*recorder
	take   limit.Take
	check  limit.Check
	tick   time.Duration
	phase  []time.Duration // each instance syncs at its own offset, as real ones do
	offers []int           // requests per instance per tick
	// localSince[i] is what instance i allowed locally since its last
	// successful sync; exact counts what Redis decided for the hot keys.
	localSince []int64
	exact      int64
	// paced keeps Redis's clock (TIME, which refills buckets) with the
	// injected one: run sleeps so that real time since start is never
	// behind injected time since t0.
	paced     bool
	start, t0 time.Time
}

func newSim(t *testing.T, n int, take limit.Take, offers []int) *sim {
	t.Helper()
	tg := redistest.New(t)
	rdb := redistest.Client(t, tg.URL)
	s := &sim{t: t, clk: &clock{t: time.Unix(1_700_000_000, 0)}, store: store.NewRedis(rdb, tg.Prefix), rdb: rdb, prefix: tg.Prefix,
		take: take, tick: 10 * time.Millisecond, offers: offers, localSince: make([]int64, n)}
	s.flaky = &flaky{st: s.store}
	name := strings.TrimPrefix(take.Key.Space, "l:")
	s.check = limit.Check{Policy: name, Key: take.Key.ID, Cost: 1}
	pols := map[string]limit.Policy{name: simPolicy(take)}
	for i := range n {
		rec := &recorder{Syncer: s.flaky, remaining: take.Limit}
		h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: rec, Now: s.clk.now, Instances: func() int { return n }})
		s.recs, s.hot = append(s.recs, rec), append(s.hot, h)
		s.lims = append(s.lims, limit.New(pols, s.flaky, nil).WithHotKeys(h))
		phase := time.Duration(i) * interval / time.Duration(n)
		s.phase = append(s.phase, phase-phase%s.tick)
	}
	return s
}

// simPolicy is the sync-mode policy whose checks are take.
func simPolicy(take limit.Take) limit.Policy {
	p := limit.Policy{Algorithm: take.Algorithm, Mode: limit.ModeSync, SyncInterval: interval, OnStoreError: limit.FallbackClosed}
	if take.Algorithm == limit.TokenBucket {
		p.Capacity, p.RefillPerSecond = take.Limit, take.Rate
	} else {
		p.Limit, p.Window = take.Limit, take.Window
	}
	return p
}

const interval = 100 * time.Millisecond

// run advances the clock by d, offering each instance its requests every
// tick and syncing each instance on its own phase. It returns what was
// allowed in all, and the most allowed in any one sync interval.
func (s *sim) run(d time.Duration) (allowed, perInterval int64) {
	var slot int64
	for elapsed := time.Duration(0); elapsed < d; elapsed += s.tick {
		for i := range s.hot {
			n := s.offer(i)
			allowed += n
			slot += n
			if (elapsed-s.phase[i])%interval == 0 && elapsed >= s.phase[i] {
				_ = s.sync(i)
			}
		}
		if (elapsed+s.tick)%interval == 0 {
			perInterval = max(perInterval, slot)
			slot = 0
		}
		s.advance(s.tick)
	}
	return allowed, perInterval
}

// advance moves the injected clock by d and, when paced, waits for the
// real one to catch up.
func (s *sim) advance(d time.Duration) {
	s.clk.t = s.clk.t.Add(d)
	if !s.paced {
		return
	}
	if ahead := s.clk.t.Sub(s.t0) - time.Since(s.start); ahead > 0 {
		time.Sleep(ahead)
	}
}

// offer offers instance i its requests of one tick and returns how many
// were allowed.
func (s *sim) offer(i int) (allowed int64) {
	for range s.offers[i] {
		b, err := s.lims[i].Check(context.Background(), []limit.Check{s.check})
		if err != nil {
			continue // the store is down: refused, as closed
		}
		if d := b.Decisions[0]; d.Allowed {
			allowed++
			if d.Mode == limit.ModeSync {
				s.localSince[i]++
			} else {
				s.exact++
			}
		}
	}
	return allowed
}

// sync syncs instance i, after checking that since its last sync it spent
// locally no more than its share of what that sync read: remaining / N,
// rounded down (a bucket's remaining with one interval's refill).
func (s *sim) sync(i int) error {
	n := int64(len(s.hot))
	avail := s.recs[i].remaining
	if s.take.Algorithm == limit.TokenBucket {
		avail = min(avail, s.take.Limit) + int64(s.take.Rate*interval.Seconds())
	}
	if share := max(0, avail) / n; s.localSince[i] > share {
		s.t.Fatalf("instance %d spent %d locally between syncs, above its share %d (remaining %d / N %d)",
			i, s.localSince[i], share, s.recs[i].remaining, n)
	}
	before := s.recs[i].syncs
	err := s.hot[i].SyncDue(context.Background())
	if s.recs[i].syncs > before {
		s.localSince[i] = 0
	}
	return err
}

// settle sends every pending delta.
func (s *sim) settle() {
	s.advance(interval)
	for i := range s.hot {
		if err := s.sync(i); err != nil {
			s.t.Fatalf("settling sync: %v", err)
		}
	}
}

// TestSyncModeOvershootIsBounded: what all instances allow in a window
// stays within limit + A, and each instance spends at most its share
// (remaining / N, rounded down) between two syncs (sim.sync checks it).
func TestSyncModeOvershootIsBounded(t *testing.T) {
	const n, lim = 4, 1000
	window := 10 * time.Second
	for _, tc := range []struct {
		name   string
		offers []int
	}{
		{"even traffic", []int{5, 5, 5, 5}},
		{"badly uneven traffic", []int{17, 1, 1, 1}},
		{"one instance only", []int{20, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			take := limit.Take{Key: limit.PolicyKey("sim", "hot"), Algorithm: limit.FixedWindow, Limit: lim, Window: window}
			s := newSim(t, n, take, tc.offers)
			for w := 1; w <= 2; w++ {
				s.exact = 0
				allowed, perInterval := s.run(window - 2*interval)
				s.settle()
				bound := lim + min(lim, perInterval)
				t.Logf("window %d: allowed %d of limit %d (%d decided exactly; bound %d = limit + A, A = %d allowed in one sync interval)",
					w, allowed, lim, s.exact, bound, perInterval)
				if allowed > bound {
					t.Fatalf("window %d: allowed %d, above the bound %d", w, allowed, bound)
				}
				if allowed < lim*9/10 {
					t.Errorf("window %d: allowed only %d of %d: sync mode starves", w, allowed, lim)
				}
				// No count is lost: Redis holds exactly what was allowed.
				n, _ := s.store.Sync(context.Background(), []limit.SyncItem{{Take: take}})
				if global := lim - n[0].Remaining; global != allowed {
					t.Errorf("window %d: Redis counted %d, instances allowed %d", w, global, allowed)
				}
				// The window ends: Redis would expire the key now; the
				// simulation's clock is fake, so the test deletes it.
				s.clk.t = s.clk.t.Add(2 * interval)
				delLimits(t, s.rdb, s.prefix+"l:sim:*")
			}
		})
	}
}

// delLimits deletes the limits' hashes matching pattern (the store keeps
// many limits to a hash, named by policy, slice and shard).
func delLimits(t *testing.T, rdb *redis.Client, pattern string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		rdb.Del(ctx, k)
	}
}

func TestSyncModeLosesNoCountsWhileRedisIsDown(t *testing.T) {
	const n, lim = 3, 10_000
	take := limit.Take{Key: limit.PolicyKey("sim", "down"), Algorithm: limit.FixedWindow, Limit: lim, Window: time.Minute}
	s := newSim(t, n, take, []int{3, 2, 1})
	before, _ := s.run(5 * interval)
	s.flaky.down.Store(true)
	during, _ := s.run(2 * interval) // two failed syncs per instance
	if during == 0 {
		t.Fatal("nothing was allowed while Redis was down: instances should spend their share")
	}
	var pending int64
	for _, h := range s.hot {
		pending += h.Pending()
	}
	if pending < during {
		t.Fatalf("pending deltas %d < %d allowed while down: counts were dropped", pending, during)
	}
	s.flaky.down.Store(false)
	after, _ := s.run(3 * interval)
	s.settle()
	st, err := s.store.Sync(context.Background(), []limit.SyncItem{{Take: take}})
	if err != nil {
		t.Fatal(err)
	}
	total := before + during + after
	if global := lim - st[0].Remaining; global != total {
		t.Fatalf("after recovery Redis counted %d, instances allowed %d (%d before, %d during, %d after the outage)",
			global, total, before, during, after)
	}
	for _, h := range s.hot {
		if h.Discarded() != 0 {
			t.Errorf("discarded %d deltas; none was older than its window", h.Discarded())
		}
	}
}

// TestSyncModeTokenBucket runs in real time: the bucket refills by Redis's
// clock, which an injected clock cannot move.
func TestSyncModeTokenBucket(t *testing.T) {
	const n = 4
	take := limit.Take{Key: limit.PolicyKey("sim", "tb"), Algorithm: limit.TokenBucket, Limit: 200, Rate: 100}
	s := newSim(t, n, take, []int{9, 3, 2, 1})
	d := 3 * time.Second
	s.paced, s.start, s.t0 = true, time.Now(), s.clk.t
	allowed, perInterval := s.run(d)
	elapsed := time.Since(s.start)
	s.settle()
	// A bucket releases at most capacity + rate x time (Redis's time: at
	// least d, more when the machine was too slow to keep pace); sync mode
	// may add the same overshoot as a window.
	ideal := int64(200 + 100*d.Seconds())
	bound := int64(200+100*elapsed.Seconds()) + perInterval
	t.Logf("token bucket: allowed %d in %s (%s real), ideal %d, bound %d", allowed, d, elapsed.Round(time.Millisecond), ideal, bound)
	if allowed > bound || allowed < ideal*8/10 {
		t.Fatalf("allowed %d, want between %d and %d", allowed, ideal*8/10, bound)
	}
}

func TestStaleDeltasAreDiscarded(t *testing.T) {
	take := limit.Take{Key: limit.PolicyKey("sim", "stale"), Algorithm: limit.FixedWindow, Limit: 100, Window: time.Second}
	s := newSim(t, 1, take, []int{1})
	s.flaky.down.Store(true)
	s.run(500 * time.Millisecond)
	pending := s.hot[0].Pending()
	s.clk.t = s.clk.t.Add(2 * time.Second) // the window is long over
	s.flaky.down.Store(false)
	if err := s.hot[0].SyncDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.hot[0].Discarded(); got != pending || pending == 0 {
		t.Fatalf("discarded %d, want the %d deltas of the ended window", got, pending)
	}
}

func TestHotKeyTableIsBounded(t *testing.T) {
	h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: nil, MaxKeys: 3})
	for i := range 4 {
		tk := limit.Take{Key: limit.Key{Space: "lim:x", ID: fmt.Sprint(i), Name: "fw"}, Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second, Cost: 1}
		_, ok := h.Decide(tk, time.Second)
		if want := i < 3; ok != want {
			t.Fatalf("key %d: local = %v, want %v (table of 3)", i, ok, want)
		}
	}
}

func TestSyncModeRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*guard.Policies)
		field string
	}{
		{"otp", func(p *guard.Policies) { p.OTP.Mode = limit.ModeSync }, "otp.mode"},
		{"exact policy", func(p *guard.Policies) {
			p.Limits["x"] = limit.Policy{Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 1, Mode: limit.ModeSync, Exact: true}
		}, "limits.x.mode"},
		{"unknown mode", func(p *guard.Policies) {
			p.Limits["x"] = limit.Policy{Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 1, Mode: "lazy"}
		}, "limits.x.mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			tc.edit(&p)
			p.FillDefaults()
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	p := guard.DefaultPolicies()
	p.Limits["hot"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second, Mode: limit.ModeSync}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("a plain sync policy: %v", err)
	}
	if got := p.Limits["hot"].SyncInterval; got != limit.DefaultSyncInterval {
		t.Errorf("default sync_interval = %v, want %v", got, limit.DefaultSyncInterval)
	}
}

// syncFunc is a Syncer that is a function.
type syncFunc func(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error)

func (f syncFunc) Sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	return f(ctx, items)
}

// reads is a Syncer that reports remaining for every key.
func reads(remaining int64) syncFunc {
	return func(_ context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
		out := make([]limit.SyncState, len(items))
		for i := range out {
			out[i] = limit.SyncState{Remaining: remaining, ResetAfter: time.Minute}
		}
		return out, nil
	}
}

// spendLocally decides t until a local denial or a check handed back, at
// most 10,000 times, and returns what was allowed locally and whether a
// check was handed back.
func spendLocally(h *resilience.HotKeys, t limit.Take) (allowed int64, handedBack bool) {
	for range 10_000 {
		r, ok := h.Decide(t, interval)
		if !ok {
			return allowed, true
		}
		if !r.Allowed {
			return allowed, false
		}
		allowed += t.Cost
	}
	return allowed, false
}

// TestSyncModeShareIsRoundedDown: between syncs an instance spends at most
// floor(remaining / N); what the rounding leaves, and a cost above the
// share, is handed back to be decided exactly.
func TestSyncModeShareIsRoundedDown(t *testing.T) {
	const n = 4
	fw := func(lim, cost int64) limit.Take {
		return limit.Take{Key: limit.Key{Space: "lim:share", ID: "k", Name: "fw"}, Algorithm: limit.FixedWindow, Limit: lim, Window: time.Minute, Cost: cost}
	}
	tb := limit.Take{Key: limit.Key{Space: "lim:share", ID: "k", Name: "tb"}, Algorithm: limit.TokenBucket, Limit: 200, Rate: 100, Cost: 1}
	for _, tc := range []struct {
		name       string
		take       limit.Take
		remaining  int64 // what the sync reads
		want       int64 // allowed locally until the sync after
		handedBack bool
	}{
		{"window: remaining / N, rounded down", fw(2000, 1), 1003, 250, false},
		{"window: nothing left", fw(2000, 1), -5, 0, false},
		{"window: fewer than N left are decided exactly", fw(2000, 1), 3, 0, true},
		{"window: a limit below N is decided exactly", fw(3, 1), 3, 0, true},
		{"window: a cost above the share, within what is left", fw(2000, 300), 1000, 0, true},
		{"window: a cost above what is left", fw(2000, 300), 200, 0, false},
		{"bucket: what it holds and one interval's refill", tb, 13, 5, false}, // (13 + 10) / 4
		{"bucket: a debt is paid back first", tb, -8, 0, true},                // -8 + 10 = 2, fewer than N
		{"bucket: a debt above the refill", tb, -30, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: reads(tc.remaining), Instances: func() int { return n }})
			peek := tc.take
			peek.Cost = 0
			h.Decide(peek, interval) // enters the key; its sync is due at once
			if err := h.SyncDue(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, handedBack := spendLocally(h, tc.take)
			if got != tc.want || handedBack != tc.handedBack {
				t.Errorf("remaining %d, N %d: allowed locally %d (handed back %v), want %d (handed back %v)",
					tc.remaining, n, got, handedBack, tc.want, tc.handedBack)
			}
		})
	}
	t.Run("a new key starts with a full share", func(t *testing.T) {
		h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: reads(0), Instances: func() int { return n }})
		if got, _ := spendLocally(h, fw(1003, 1)); got != 250 {
			t.Errorf("allowed %d before the first sync, want 1003 / 4 = 250", got)
		}
	})
}

// TestSyncModeFollowsOnStoreErrorWhileSyncFails: while the hot keys'
// syncs fail (Redis killed), a sync-mode policy is decided by its
// on_store_error, as an exact one, not from its last local share; a
// successful sync brings sync mode back.
func TestSyncModeFollowsOnStoreErrorWhileSyncFails(t *testing.T) {
	const n = 2
	srv := redistest.Start(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	st := store.NewRedis(rdb, redistest.Prefix())
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	syncMode := func(p limit.Policy) limit.Policy {
		p.Mode, p.SyncInterval = limit.ModeSync, interval
		return p
	}
	window := time.Minute
	pols := map[string]limit.Policy{
		"closed": syncMode(limit.Policy{Algorithm: limit.FixedWindow, Limit: 100, Window: window, OnStoreError: limit.FallbackClosed}),
		"open":   syncMode(limit.Policy{Algorithm: limit.TokenBucket, Capacity: 100, RefillPerSecond: 1, OnStoreError: limit.FallbackOpen}),
		"local":  syncMode(limit.Policy{Algorithm: limit.FixedWindow, Limit: 100, Window: window, OnStoreError: limit.FallbackLocal, LocalLimit: 3}),
	}
	fb := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Timeout: time.Second, Instances: func() int { return n }, Now: clk.now})
	hot := resilience.NewHotKeys(resilience.HotKeysOptions{Store: st, Instances: func() int { return n }, Now: clk.now})
	lim := limit.New(pols, fb, nil).WithHotKeys(hot)
	// spend checks policy up to 200 times and returns how many were
	// allowed, the mode of the last decision, and the last error.
	spend := func(policy string) (allowed int, mode limit.Mode, err error) {
		for range 200 {
			b, err := lim.Check(context.Background(), []limit.Check{{Policy: policy, Key: "k", Cost: 1}})
			if err != nil {
				return allowed, "", err
			}
			d := b.Decisions[0]
			if mode = d.Mode; !d.Allowed {
				break
			}
			allowed++
		}
		return allowed, mode, nil
	}

	// Redis up: each instance spends its share locally, 100 / 2.
	for _, p := range []string{"closed", "open", "local"} {
		if got, mode, err := spend(p); err != nil || got != 50 || mode != limit.ModeSync {
			t.Fatalf("%s, Redis up: allowed %d (mode %s, %v), want 50 in sync mode", p, got, mode, err)
		}
	}
	if err := hot.SyncDue(context.Background()); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	clk.t = clk.t.Add(interval)
	if err := hot.SyncDue(context.Background()); err == nil {
		t.Fatal("sync with Redis killed: no error")
	}
	_, _, err = spend("closed")
	wantCode(t, err, problem.CodeStoreUnavailable)
	for _, tc := range []struct {
		policy string
		want   int
	}{
		{"open", 100 / n}, // the split limit, not a local share spent before the outage
		{"local", 3},      // local_limit
	} {
		if got, mode, err := spend(tc.policy); err != nil || got != tc.want || mode != limit.ModeFallback {
			t.Errorf("%s, Redis killed: allowed %d (mode %s, %v), want %d by the fallback", tc.policy, got, mode, err, tc.want)
		}
	}

	srv.Restart()
	// The client's pool may first answer with a dead connection, or, once
	// PoolSize dials failed during the outage, with the last dial error
	// until its own probe (once a second) reaches the server again.
	for try := 0; ; try++ {
		clk.t = clk.t.Add(interval)
		if err := hot.SyncDue(context.Background()); err == nil {
			break
		} else if try == 60 {
			t.Fatalf("sync after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, mode, err := spend("closed"); err != nil || got == 0 || mode != limit.ModeSync {
		t.Errorf("closed, Redis back: allowed %d (mode %s, %v), want sync mode again", got, mode, err)
	}
}

// counting is a Syncer in memory (windows that never end) that records
// the size of each call and fails the call numbered fail (from 1).
type counting struct {
	counted map[limit.Key]int64
	sizes   []int
	fail    int
}

func (c *counting) Sync(_ context.Context, items []limit.SyncItem) ([]limit.SyncState, error) {
	c.sizes = append(c.sizes, len(items))
	if len(c.sizes) == c.fail {
		return nil, errors.New("i/o timeout")
	}
	out := make([]limit.SyncState, len(items))
	for i, it := range items {
		c.counted[it.Key] += it.Delta
		out[i] = limit.SyncState{Remaining: it.Limit - c.counted[it.Key], ResetAfter: time.Minute}
	}
	return out, nil
}

// TestHotKeySyncBatches: a large table syncs in batches; after a failed
// batch, what went through is not sent again and nothing is lost.
func TestHotKeySyncBatches(t *testing.T) {
	const keys = 1234
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	st := &counting{counted: map[limit.Key]int64{}, fail: 2}
	h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: st, Now: clk.now, Batch: 500})
	take := func(i int) limit.Take {
		return limit.Take{Key: limit.Key{Space: "lim:batch", ID: fmt.Sprint(i), Name: "fw"}, Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, Cost: 1}
	}
	for i := range keys {
		if r, ok := h.Decide(take(i), interval); !ok || !r.Allowed {
			t.Fatalf("key %d: local %v, allowed %v", i, ok, r.Allowed)
		}
	}
	if err := h.SyncDue(context.Background()); err == nil {
		t.Fatal("second batch failed: SyncDue returned no error")
	}
	if fmt.Sprint(st.sizes) != "[500 500]" {
		t.Errorf("batches %v, want [500 500]: at most 500 keys each, none after a failure", st.sizes)
	}
	if got := h.Pending(); got != keys-500 {
		t.Errorf("pending %d after the first batch went through, want %d", got, keys-500)
	}
	if _, ok := h.Decide(take(0), interval); ok {
		t.Error("a check decided locally while the last sync failed; want it handed back")
	}
	clk.t = clk.t.Add(interval)
	if err := h.SyncDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	var total int64
	for k, c := range st.counted {
		if c != 1 {
			t.Errorf("%v counted %d times, want once", k, c)
		}
		total += c
	}
	if total != keys || h.Pending() != 0 {
		t.Errorf("store counted %d (%d pending), instances allowed %d", total, h.Pending(), keys)
	}
	if _, ok := h.Decide(take(0), interval); !ok {
		t.Error("a check handed back after a successful sync; want sync mode again")
	}
}

// TestHotKeyFlushCountsLost: the last sync at stop sends what is pending;
// what it cannot send is logged once and counted.
func TestHotKeyFlushCountsLost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     int
		wantLost int64
	}{
		{"redis up", 0, 0},
		{"redis down", 1, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &counting{counted: map[limit.Key]int64{}, fail: tc.fail}
			var logs strings.Builder
			h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: st, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			for i, cost := range []int64{7, 5} {
				tk := limit.Take{Key: limit.Key{Space: "lim:flush", ID: fmt.Sprint(i), Name: "fw"}, Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute, Cost: cost}
				h.Decide(tk, time.Hour)
			}
			h.Flush(context.Background())
			var counted int64
			for _, c := range st.counted {
				counted += c
			}
			if h.Lost() != tc.wantLost || counted != 12-tc.wantLost {
				t.Errorf("lost %d, counted %d; want lost %d, counted %d", h.Lost(), counted, tc.wantLost, 12-tc.wantLost)
			}
			want := 0
			if tc.wantLost > 0 {
				want = 1
			}
			if got := strings.Count(logs.String(), "lost at shutdown"); got != want || (want == 1 && !strings.Contains(logs.String(), "units=12")) {
				t.Errorf("logged the loss %d times, want %d with units=12:\n%s", got, want, logs.String())
			}
		})
	}
}

// TestHotKeySyncLargeTable: 20,000 hot keys sync against a real Redis
// through a client built as otpguard builds the sync one (1s timeout).
func TestHotKeySyncLargeTable(t *testing.T) {
	const keys = 20_000
	tg := redistest.New(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: tg.URL, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: store.NewRedis(rdb, tg.Prefix)})
	for i := range keys {
		tk := limit.Take{Key: limit.Key{Space: "lim:large", ID: fmt.Sprint(i), Name: "fw"}, Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, Cost: 1}
		h.Decide(tk, time.Second)
	}
	start := time.Now()
	if err := h.SyncDue(context.Background()); err != nil {
		t.Fatalf("sync of %d keys: %v", keys, err)
	}
	t.Logf("synced %d keys in %s", keys, time.Since(start).Round(time.Millisecond))
	check := redistest.Client(t, tg.URL)
	pipe := check.Pipeline()
	cmds := make([]*redis.StringCmd, keys)
	for i := range cmds {
		cmds[i] = pipe.Get(context.Background(), fmt.Sprintf("%slim:large:{%d}:fw", tg.Prefix, i))
	}
	_, _ = pipe.Exec(context.Background())
	for i, c := range cmds {
		if v, err := c.Int64(); err != nil || v != 1 {
			t.Fatalf("key %d: %d %v, want 1", i, v, err)
		}
	}
	if h.Pending() != 0 {
		t.Errorf("pending %d after the sync, want 0", h.Pending())
	}
}

// BenchmarkHotKey compares one hot key decided exactly (a Redis round trip
// per check) with the same policy in sync mode (local, synced every 100ms),
// in one run:
//
//	go test -run XXX -bench HotKey -benchtime 3s ./internal/guard/
func BenchmarkHotKey(b *testing.B) {
	tg := redistest.New(b)
	rdb := redistest.Client(b, tg.URL)
	st := store.NewRedis(rdb, tg.Prefix)
	policy := limit.Policy{Algorithm: limit.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000}
	for _, mode := range []limit.Mode{limit.ModeExact, limit.ModeSync} {
		b.Run(string(mode), func(b *testing.B) {
			p := policy
			p.Mode = mode
			pols := guard.Policies{OTP: guard.DefaultPolicies().OTP, Limits: map[string]limit.Policy{"hot": p}}
			pols.FillDefaults()
			if mode == limit.ModeSync {
				l := pols.Limits["hot"]
				l.SyncInterval = interval
				pols.Limits["hot"] = l
			}
			lim := limit.New(pols.Limits, st, nil)
			if mode == limit.ModeSync {
				h := resilience.NewHotKeys(resilience.HotKeysOptions{Store: st})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { // the sync loop internal/app runs
					defer close(done)
					t := time.NewTicker(25 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-ctx.Done():
							h.Flush(context.Background())
							return
						case <-t.C:
							_ = h.SyncDue(ctx)
						}
					}
				}()
				defer func() { cancel(); <-done }()
				lim.WithHotKeys(h)
			}
			checks := []limit.Check{{Policy: "hot", Key: "partner:1", Cost: 1}}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := lim.Check(context.Background(), checks); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
