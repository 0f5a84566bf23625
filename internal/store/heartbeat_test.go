package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func TestHeartbeatCountsLiveInstances(t *testing.T) {
	t.Parallel() // its own redis-server
	const staleAfter = time.Minute
	srv := redistest.Start(t)
	prefix := redistest.Prefix()
	ctx := context.Background()
	var seen []error
	hbs := make([]*store.Heartbeat, 3)
	for i := range hbs {
		// StaleAfter is long, so a busy machine's pauses between the beats
		// below never age an instance out by accident; the one that must
		// age out is made stale by hand.
		o := store.HeartbeatOptions{Every: 50 * time.Millisecond, StaleAfter: staleAfter}
		if i == 0 {
			o.OnBeat = func(err error) { seen = append(seen, err) }
		}
		hbs[i] = store.NewHeartbeat(redistest.Client(t, srv.URL()), prefix, o)
	}
	if got := hbs[0].Instances(); got != 1 {
		t.Errorf("before any beat: N = %d, want 1", got)
	}
	for _, h := range hbs {
		if err := h.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := hbs[0].Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hbs[0].Instances(); got != 3 {
		t.Errorf("three instances beating: N = %d, want 3", got)
	}
	rdb := redistest.Client(t, srv.URL())
	key := prefix + "{instances}"
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 2*staleAfter {
		t.Errorf("the instance set's TTL: %v %v, want in (0, 2 x StaleAfter]", ttl, err)
	}

	// An instance that stops leaves at once; one that dies ages out.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { hbs[1].Run(rctx); close(done) }()
	stop()
	<-done
	if err := hbs[0].Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hbs[0].Instances(); got != 2 {
		t.Errorf("after one left: N = %d, want 2", got)
	}
	// hbs[2] never beats again: its last beat is moved back past
	// StaleAfter, by Redis's clock (the one the beats are scored by).
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	old := float64(now.Add(-staleAfter - time.Second).UnixMilli())
	z := redis.ZAddArgs{XX: true, Ch: true, Members: []redis.Z{{Score: old, Member: hbs[2].State().ID}}}
	if n, err := rdb.ZAddArgs(ctx, key, z).Result(); err != nil || n != 1 {
		t.Fatalf("age hbs[2]'s last beat: %d %v", n, err)
	}
	if err := hbs[0].Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := hbs[0].Instances(); got != 1 {
		t.Errorf("after one went silent: N = %d, want 1", got)
	}

	// Redis away: the last good N stays, the state says down.
	if err := hbs[2].Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hbs[0].Beat(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := hbs[0].Beat(ctx); err == nil {
		t.Fatal("a beat against a killed Redis succeeded")
	}
	st := hbs[0].State()
	if st.Up || st.Instances != 2 || st.LastSeen.IsZero() {
		t.Errorf("Redis down: state %+v, want down with the last N = 2", st)
	}
	if len(seen) == 0 || seen[len(seen)-1] == nil {
		t.Errorf("OnBeat was not told of the failed beat: %v", seen)
	}

	// Back, empty: counting starts over without a restart (and the last
	// N is held meanwhile: TestHeartbeatHoldsNAfterEmptyRestart).
	srv.Restart()
	beatUntilUp(t, hbs[0])
	if st := hbs[0].State(); !st.Up || st.Instances < 1 {
		t.Errorf("after restart: %+v, want up", st)
	}
}

// beatUntilUp beats h until Redis answers (a bounded poll: a restarted
// server takes a moment to accept connections).
func beatUntilUp(t *testing.T, h *store.Heartbeat) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := h.Beat(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat never recovered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestHeartbeatHoldsNAfterEmptyRestart: when Redis comes back empty, the
// instances re-announce themselves one beat at a time and the count climbs
// from 1; N must not follow it down. It holds the last good N until a full
// StaleAfter after Redis came back (on the test's clock), whether the
// restart failed a beat or fell between two beats, and a second failure
// within the hold keeps it.
func TestHeartbeatHoldsNAfterEmptyRestart(t *testing.T) {
	const stale = time.Minute // Redis itself forgets no one during the test
	srv := redistest.Start(t)
	prefix := redistest.Prefix()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	hbs := make([]*store.Heartbeat, 3)
	for i := range hbs {
		hbs[i] = store.NewHeartbeat(redistest.Client(t, srv.URL()), prefix,
			store.HeartbeatOptions{StaleAfter: stale, Now: clock.Now})
	}
	beatAll := func(hs ...*store.Heartbeat) {
		t.Helper()
		for _, h := range hs {
			if err := h.Beat(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	beatAll(hbs...)
	beatAll(hbs...)
	if got := hbs[0].Instances(); got != 3 {
		t.Fatalf("three instances beating: N = %d, want 3", got)
	}

	for _, tc := range []struct {
		name     string
		failBeat bool // a beat fails while Redis is down
	}{{"a beat failed", true}, {"between two beats", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Kill()
			if tc.failBeat {
				if err := hbs[0].Beat(context.Background()); err == nil {
					t.Fatal("a beat against a killed Redis succeeded")
				}
			}
			srv.Restart()
			beatUntilUp(t, hbs[0]) // Redis is back, empty: hbs[0] counts 1
			if got := hbs[0].Instances(); got != 3 {
				t.Errorf("first beat after an empty restart: N = %d, want the last good 3", got)
			}
			clock.Add(stale / 2)
			beatAll(hbs[1], hbs[0]) // hbs[2] never comes back: counted 2
			if got := hbs[0].Instances(); got != 3 {
				t.Errorf("half a StaleAfter after: N = %d, want 3", got)
			}
			// A second failure within the hold keeps it, however long.
			srv.Kill()
			if err := hbs[0].Beat(context.Background()); err == nil {
				t.Fatal("a beat against a killed Redis succeeded")
			}
			clock.Add(2 * stale)
			if got := hbs[0].Instances(); got != 3 {
				t.Errorf("Redis down again within the hold: N = %d, want 3", got)
			}
			srv.Restart()
			beatUntilUp(t, hbs[0])
			beatAll(hbs[1])
			clock.Add(stale - time.Millisecond)
			beatAll(hbs[1], hbs[0])
			if got := hbs[0].Instances(); got != 3 {
				t.Errorf("just short of StaleAfter after Redis came back: N = %d, want 3", got)
			}
			clock.Add(time.Millisecond)
			beatAll(hbs[1], hbs[0])
			if got := hbs[0].Instances(); got != 2 {
				t.Errorf("a full StaleAfter after Redis came back: N = %d, want the 2 still beating", got)
			}
			beatAll(hbs[2], hbs[0]) // everyone back, for the next case
			if got := hbs[0].Instances(); got != 3 {
				t.Fatalf("all three beating again: N = %d, want 3", got)
			}
		})
	}
}

// TestHeartbeatCountsVanishedInstances: an instance that stops beating
// without leaving (a SIGKILL: its unsynced hot-key counts are lost) is
// counted as vanished, once, by the instance whose beat forgets it; one
// that leaves cleanly is not; nor are the instances forgotten during an
// outage, which come back.
func TestHeartbeatCountsVanishedInstances(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix()
	ctx := context.Background()
	rdb := redistest.Client(t, srv.URL())
	key := prefix + "{instances}"
	// stale marks id as last seen long ago, as if it had stopped beating
	// StaleAfter ago (Redis's clock, which the test does not drive).
	stale := func(id string) {
		t.Helper()
		if err := rdb.ZAdd(ctx, key, redis.Z{Score: 0, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	hbs := make([]*store.Heartbeat, 4)
	for i := range hbs {
		hbs[i] = store.NewHeartbeat(redistest.Client(t, srv.URL()), prefix, store.HeartbeatOptions{StaleAfter: time.Minute})
		if err := hbs[i].Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	vanished := func() (sum int64) {
		for _, h := range hbs {
			sum += h.Vanished()
		}
		return sum
	}

	// hbs[1] leaves cleanly.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { hbs[1].Run(rctx); close(done) }()
	stop()
	<-done
	for _, i := range []int{0, 2, 3, 0} {
		if err := hbs[i].Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := vanished(); got != 0 {
		t.Errorf("one instance left cleanly: %d vanished, want 0", got)
	}

	// hbs[3] is killed: it stops beating and never leaves.
	stale(hbs[3].State().ID)
	for _, i := range []int{2, 0, 2} {
		if err := hbs[i].Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := vanished(); got != 1 {
		t.Errorf("one instance killed: %d vanished over the survivors, want 1", got)
	}
	if got := hbs[0].Instances(); got != 2 {
		t.Errorf("after the kill: N = %d, want 2", got)
	}

	// Redis away for longer than StaleAfter: every entry is stale when it
	// comes back; the first to beat forgets the other, which is alive.
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: 0, Member: hbs[0].State().ID}, redis.Z{Score: 0, Member: hbs[2].State().ID}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 0, 2} {
		if err := hbs[i].Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := vanished(); got != 1 {
		t.Errorf("after everyone was forgotten in an outage: %d vanished, want still 1", got)
	}
}
