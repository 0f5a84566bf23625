package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// clock is the simulation's injected clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// flaky is a SyncStore that can be switched off, as a Redis that refuses
// connections: while down, nothing reaches Redis.
type flaky struct {
	guard.SyncStore
	down atomic.Bool
}

func (f *flaky) Sync(ctx context.Context, items []guard.SyncItem) ([]guard.SyncState, error) {
	if f.down.Load() {
		return nil, errors.New("connection refused")
	}
	return f.SyncStore.Sync(ctx, items)
}

type sim struct {
	t      *testing.T
	clk    *clock
	store  *store.Redis
	rdb    *redis.Client
	prefix string
	flaky  *flaky
	hot    []*guard.HotKeys
	take   guard.Take
	tick   time.Duration
	phase  []time.Duration // each instance syncs at its own offset, as real ones do
	offers []int           // requests per instance per tick
}

func newSim(t *testing.T, n int, take guard.Take, offers []int) *sim {
	t.Helper()
	tg := redistest.New(t)
	rdb := redistest.Client(t, tg.URL)
	s := &sim{t: t, clk: &clock{t: time.Unix(1_700_000_000, 0)}, store: store.NewRedis(rdb, tg.Prefix), rdb: rdb, prefix: tg.Prefix,
		take: take, tick: 10 * time.Millisecond, offers: offers}
	s.flaky = &flaky{SyncStore: s.store}
	for i := range n {
		s.hot = append(s.hot, guard.NewHotKeys(guard.HotKeysOptions{
			Store: s.flaky, Now: s.clk.now, Instances: func() int { return n },
		}))
		phase := time.Duration(i) * interval / time.Duration(n)
		s.phase = append(s.phase, phase-phase%s.tick)
	}
	return s
}

const interval = 100 * time.Millisecond

// run advances the clock by d, offering each instance its requests every
// tick and syncing each instance on its own phase. It returns what was
// allowed in all, and the most allowed in any one sync interval.
func (s *sim) run(d time.Duration) (allowed, perInterval int64) {
	ctx := context.Background()
	var slot int64
	for elapsed := time.Duration(0); elapsed < d; elapsed += s.tick {
		for i, h := range s.hot {
			for range s.offers[i] {
				tk := s.take
				tk.Cost = 1
				r, ok := h.Decide(tk, interval)
				if !ok {
					s.t.Fatal("hot key table refused the key")
				}
				if r.Allowed {
					allowed++
					slot++
				}
			}
			if (elapsed-s.phase[i])%interval == 0 && elapsed >= s.phase[i] {
				_ = h.SyncDue(ctx)
			}
		}
		if (elapsed+s.tick)%interval == 0 {
			perInterval = max(perInterval, slot)
			slot = 0
		}
		s.clk.t = s.clk.t.Add(s.tick)
	}
	return allowed, perInterval
}

// settle sends every pending delta.
func (s *sim) settle() {
	s.clk.t = s.clk.t.Add(interval)
	for _, h := range s.hot {
		if err := h.SyncDue(context.Background()); err != nil {
			s.t.Fatalf("settling sync: %v", err)
		}
	}
}

func TestSyncModeOvershootIsBounded(t *testing.T) {
	const n, limit = 4, 1000
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
			take := guard.Take{Key: guard.Key{Space: "lim:sim", ID: "hot", Name: "fw"}, Algorithm: guard.FixedWindow, Limit: limit, Window: window}
			s := newSim(t, n, take, tc.offers)
			for w := 1; w <= 2; w++ {
				allowed, perInterval := s.run(window - 2*interval)
				s.settle()
				bound := limit + (n - 1) + min(limit, perInterval)
				t.Logf("window %d: allowed %d of limit %d (bound %d = limit + (N-1) + A, A = %d allowed in one sync interval)",
					w, allowed, limit, bound, perInterval)
				if allowed > bound {
					t.Fatalf("window %d: allowed %d, above the bound %d", w, allowed, bound)
				}
				if allowed < limit*9/10 {
					t.Errorf("window %d: allowed only %d of %d: sync mode starves", w, allowed, limit)
				}
				// No count is lost: Redis holds exactly what was allowed.
				n, _ := s.store.Sync(context.Background(), []guard.SyncItem{{Take: take}})
				if global := limit - n[0].Remaining; global != allowed {
					t.Errorf("window %d: Redis counted %d, instances allowed %d", w, global, allowed)
				}
				// The window ends: Redis would expire the key now; the
				// simulation's clock is fake, so the test deletes it.
				s.clk.t = s.clk.t.Add(2 * interval)
				s.rdb.Del(context.Background(), s.prefix+"lim:sim:{hot}:fw")
			}
		})
	}
}

func TestSyncModeLosesNoCountsWhileRedisIsDown(t *testing.T) {
	const n, limit = 3, 10_000
	take := guard.Take{Key: guard.Key{Space: "lim:sim", ID: "down", Name: "fw"}, Algorithm: guard.FixedWindow, Limit: limit, Window: time.Minute}
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
	st, err := s.store.Sync(context.Background(), []guard.SyncItem{{Take: take}})
	if err != nil {
		t.Fatal(err)
	}
	total := before + during + after
	if global := limit - st[0].Remaining; global != total {
		t.Fatalf("after recovery Redis counted %d, instances allowed %d (%d before, %d during, %d after the outage)",
			global, total, before, during, after)
	}
	for _, h := range s.hot {
		if h.Discarded() != 0 {
			t.Errorf("discarded %d deltas; none was older than its window", h.Discarded())
		}
	}
}

func TestSyncModeTokenBucket(t *testing.T) {
	const n = 4
	take := guard.Take{Key: guard.Key{Space: "lim:sim", ID: "tb", Name: "tb"}, Algorithm: guard.TokenBucket, Limit: 200, Rate: 100}
	s := newSim(t, n, take, []int{9, 3, 2, 1})
	d := 3 * time.Second
	allowed, perInterval := s.run(d)
	s.settle()
	// A bucket releases at most capacity + rate x time; sync mode may add
	// the same overshoot as a window.
	ideal := int64(200 + 100*d.Seconds())
	bound := ideal + (n - 1) + perInterval
	t.Logf("token bucket: allowed %d in %s, ideal %d, bound %d", allowed, d, ideal, bound)
	if allowed > bound || allowed < ideal*8/10 {
		t.Fatalf("allowed %d, want between %d and %d", allowed, ideal*8/10, bound)
	}
}

func TestStaleDeltasAreDiscarded(t *testing.T) {
	take := guard.Take{Key: guard.Key{Space: "lim:sim", ID: "stale", Name: "fw"}, Algorithm: guard.FixedWindow, Limit: 100, Window: time.Second}
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
	h := guard.NewHotKeys(guard.HotKeysOptions{Store: nil, MaxKeys: 3})
	for i := range 4 {
		tk := guard.Take{Key: guard.Key{Space: "lim:x", ID: fmt.Sprint(i), Name: "fw"}, Algorithm: guard.FixedWindow, Limit: 5, Window: time.Second, Cost: 1}
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
		{"otp", func(p *guard.Policies) { p.OTP.Mode = guard.ModeSync }, "otp.mode"},
		{"exact policy", func(p *guard.Policies) {
			p.Limits["x"] = guard.LimitPolicy{Algorithm: guard.TokenBucket, Capacity: 5, RefillPerSecond: 1, Mode: guard.ModeSync, Exact: true}
		}, "limits.x.mode"},
		{"unknown mode", func(p *guard.Policies) {
			p.Limits["x"] = guard.LimitPolicy{Algorithm: guard.TokenBucket, Capacity: 5, RefillPerSecond: 1, Mode: "lazy"}
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
	p.Limits["hot"] = guard.LimitPolicy{Algorithm: guard.FixedWindow, Limit: 5, Window: guard.Duration(time.Second), Mode: guard.ModeSync}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("a plain sync policy: %v", err)
	}
	if got := p.Limits["hot"].SyncInterval.D(); got != guard.DefaultSyncInterval {
		t.Errorf("default sync_interval = %v, want %v", got, guard.DefaultSyncInterval)
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
	policy := guard.LimitPolicy{Algorithm: guard.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000}
	for _, mode := range []guard.Mode{guard.ModeExact, guard.ModeSync} {
		b.Run(string(mode), func(b *testing.B) {
			p := policy
			p.Mode = mode
			pols := guard.Policies{OTP: guard.DefaultPolicies().OTP, Limits: map[string]guard.LimitPolicy{"hot": p}}
			pols.FillDefaults()
			if mode == guard.ModeSync {
				l := pols.Limits["hot"]
				l.SyncInterval = guard.Duration(interval)
				pols.Limits["hot"] = l
			}
			lim := guard.NewLimiter(pols.Limits, st, nil)
			if mode == guard.ModeSync {
				h := guard.NewHotKeys(guard.HotKeysOptions{Store: st})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { h.Run(ctx, 25*time.Millisecond); close(done) }()
				defer func() { cancel(); <-done }()
				lim.WithHotKeys(h)
			}
			checks := []guard.Check{{Policy: "hot", Key: "partner:1", Cost: 1}}
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
