package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func TestHeartbeatCountsLiveInstances(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix()
	ctx := context.Background()
	var seen []error
	hbs := make([]*store.Heartbeat, 3)
	for i := range hbs {
		o := store.HeartbeatOptions{Every: 50 * time.Millisecond, StaleAfter: 400 * time.Millisecond}
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
	if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > 800*time.Millisecond {
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
	time.Sleep(450 * time.Millisecond) // hbs[2] never beats again
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
