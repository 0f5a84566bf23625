package store_test

import (
	"context"
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

	// Back, empty: counting starts over without a restart.
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := hbs[0].Beat(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat never recovered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := hbs[0].State(); !st.Up || st.Instances != 1 {
		t.Errorf("after restart: %+v, want up with N = 1", st)
	}
}
