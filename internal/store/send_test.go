package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func sendVolume(now time.Time, floor int64) *guard.VolumeTake {
	return &guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "GB", Name: "h"},
		Quarantine: limit.Key{Space: "otp:vel", ID: "GB", Name: "quarantine"},
		Now:        now, Hour: now.Unix() / 3600, Lookback: 24, Floor: floor, QFloor: 1, Factor: 3, HistoryMinSends: 200}
}

// checkTakeSend takes two windows and the velocity rule (floor 1) twice:
// the windows count every hit, the velocity rule only the one it allows,
// all in the round trips wantRT says.
func checkTakeSend(t *testing.T, s *store.Redis, rt *redistest.RoundTrips, wantRT int64) {
	t.Helper()
	ctx := context.Background()
	takes := []limit.Take{fw("a", 1, time.Minute, 1), fw("b", 5, time.Minute, 1)}
	vol := sendVolume(time.Now(), 1)
	for i, want := range []struct {
		a, b, vol bool
		count     int64
	}{{true, true, true, 1}, {false, true, false, 1}} {
		if rt != nil {
			rt.Reset()
		}
		res, vr, err := s.TakeSend(ctx, takes, vol)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if rt != nil && rt.N() != wantRT {
			t.Errorf("send %d: %d round trips, want %d", i, rt.N(), wantRT)
		}
		if vr == nil {
			t.Fatalf("send %d: no velocity result", i)
		}
		if res[0].Allowed != want.a || res[1].Allowed != want.b || vr.Allowed != want.vol || vr.Count != want.count {
			t.Errorf("send %d: windows %v %v, velocity %+v; want %v %v, velocity allowed %v count %d",
				i, res[0].Allowed, res[1].Allowed, *vr, want.a, want.b, want.vol, want.count)
		}
		if res[0].Count != int64(i+1) || res[1].Count != int64(i+1) || !res[0].Spent {
			t.Errorf("send %d: counts %d %d (spent %v), want %d each: a window counts every hit", i, res[0].Count, res[1].Count, res[0].Spent, i+1)
		}
		if res[0].ResetAfter <= 0 || res[0].ResetAfter > time.Minute {
			t.Errorf("send %d: reset after %v, want within the window", i, res[0].ResetAfter)
		}
	}
}

// TestTakeSend: a send's windows and its velocity count in one MULTI, on
// a single Redis and on miniredis.
func TestTakeSend(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			if err := s.LoadScripts(context.Background()); err != nil {
				t.Fatal(err)
			}
			rt := &redistest.RoundTrips{}
			b.rdb.AddHook(rt)
			checkTakeSend(t, s, rt, 1)
		})
	}
}

// TestTakeSendOnCluster: the limits go one slot at a time, in order, and
// the velocity count last: three round trips for a send every limit
// allows. A send the first refuses costs one round trip and counts
// nothing else, so it has nothing to refund.
func TestTakeSendOnCluster(t *testing.T) {
	s, _, rt, _ := clusterStore(t)
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	takes := []limit.Take{fw("a", 1, time.Minute, 1), fw("b", 5, time.Minute, 1)}
	if store.Slot("{a}") == store.Slot("{b}") {
		t.Fatal("the test needs its two keys in different slots")
	}
	vol := sendVolume(time.Now(), 1)

	rt.Reset()
	res, vr, err := s.TakeSend(ctx, takes, vol)
	if err != nil {
		t.Fatal(err)
	}
	if rt.N() != 3 {
		t.Errorf("allowed send: %d round trips, want 3", rt.N())
	}
	if !res[0].Allowed || !res[1].Allowed || res[0].Count != 1 || res[1].Count != 1 || vr == nil || !vr.Allowed || vr.Count != 1 {
		t.Errorf("allowed send: windows %+v %+v, velocity %+v; want both allowed with count 1, velocity allowed with count 1", res[0], res[1], vr)
	}

	rt.Reset()
	res, vr, err = s.TakeSend(ctx, takes, vol)
	if err != nil {
		t.Fatal(err)
	}
	if rt.N() != 1 {
		t.Errorf("refused send: %d round trips, want 1", rt.N())
	}
	if res[0].Allowed || res[0].Count != 2 || !res[0].Spent {
		t.Errorf("refused send: first window %+v, want refused at count 2, spent (a window keeps the attempt that it denies)", res[0])
	}
	if !res[1].Allowed || res[1].Spent || vr == nil || vr.Allowed || vr.Count != 0 {
		t.Errorf("refused send: second window %+v, velocity %+v; want neither counted", res[1], vr)
	}
	// Nothing but the refused window was counted: the next send the number
	// allows sees the second window and the velocity count where they were.
	got, err := s.Take(ctx, []limit.Take{fw("b", 5, time.Minute, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Count != 2 {
		t.Errorf("second window after a refused send: count %d, want 2 (1 + this take)", got[0].Count)
	}
}

// TestTakeSendAfterScriptFlush: the velocity script lost from the cache
// runs once (EVAL), and the windows of the same MULTI count once.
func TestTakeSendAfterScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Client(t, srv.URL())
	s := store.NewRedis(c, "p:")
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, vr, err := s.TakeSend(ctx, []limit.Take{fw("a", 5, time.Minute, 1)}, sendVolume(time.Now(), 10))
	if err != nil {
		t.Fatalf("TakeSend after SCRIPT FLUSH: %v", err)
	}
	if res[0].Count != 1 || vr == nil || !vr.Allowed || vr.Count != 1 {
		t.Errorf("after flush: window count %d, velocity %+v; want 1 and allowed with count 1", res[0].Count, vr)
	}
}

// TestCountConversionsInOrder: a batch of the watch's events answers what
// the same events, one call each, answer (on another prefix), event by
// event, in one round trip.
func TestCountConversionsInOrder(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			batched := store.NewRedis(b.rdb, b.prefix+"batch:")
			single := store.NewRedis(b.rdb, b.prefix+"single:")
			ctx := context.Background()
			if err := batched.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			x := limit.Key{Space: "conv:prefix", ID: "+447400", Name: "m"}
			y := limit.Key{Space: "conv:country", ID: "GB", Name: "m"}
			counts := []guard.ConversionCount{
				{Kind: guard.ConversionSend, Now: now, Subjects: []limit.Key{x, y}},
				{Kind: guard.ConversionVerify, Now: now, Subjects: []limit.Key{x, y}},
				{Kind: guard.ConversionSend, Now: now, Subjects: []limit.Key{x}},
				{Kind: guard.ConversionSend, Now: now, Subjects: []limit.Key{x, y}},
			}
			rt := &redistest.RoundTrips{}
			b.rdb.AddHook(rt)
			got, err := batched.CountConversions(ctx, time.Hour, 0, counts)
			if err != nil {
				t.Fatal(err)
			}
			if rt.N() != 1 {
				t.Errorf("batch of %d events: %d round trips, want 1", len(counts), rt.N())
			}
			for i, c := range counts {
				want, err := single.CountConversion(ctx, c.Kind, c.Now, time.Hour, 0, c.Subjects)
				if err != nil {
					t.Fatal(err)
				}
				for j := range want {
					if got[i][j] != want[j] {
						t.Errorf("event %d subject %s: batched %+v, one by one %+v", i, c.Subjects[j].ID, got[i][j], want[j])
					}
				}
			}
			if last := got[3]; last[0] != (guard.Tally{Sends: 3, Verifies: 1}) {
				t.Errorf("prefix after the batch: %+v, want 3 sends and 1 verify (no delay)", last[0])
			}
		})
	}
}

// TestCountConversionsManyCalls: a batch larger than one script call holds
// (the counts split over several calls of one pipeline) answers what the
// events answer one by one, in one round trip; and after the server lost
// its script cache, again.
func TestCountConversionsManyCalls(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redistest.Client(t, "redis://"+m.Addr())
	batched := store.NewRedis(rdb, "batch:")
	single := store.NewRedis(rdb, "single:")
	ctx := context.Background()
	now := time.Now()
	x := limit.Key{Space: "conv:prefix", ID: "+2348", Name: "m"}
	y := limit.Key{Space: "conv:country", ID: "NG", Name: "m"}
	z := limit.Key{Space: "conv:prefix", ID: "+23480", Name: "m"}
	var counts []guard.ConversionCount
	for i := range 50 { // 150 counts: three script calls
		kind := guard.ConversionSend
		if i%3 == 2 {
			kind = guard.ConversionVerify
		}
		counts = append(counts, guard.ConversionCount{Kind: kind, Now: now.Add(time.Duration(i) * time.Second), Subjects: []limit.Key{x, y, z}})
	}
	for round, flush := range []bool{false, true} {
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		} else if err := batched.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
		rt := &redistest.RoundTrips{}
		rdb.AddHook(rt)
		got, err := batched.CountConversions(ctx, time.Hour, 0, counts)
		if err != nil {
			t.Fatal(err)
		}
		if !flush && rt.N() != 1 {
			t.Errorf("batch of %d events: %d round trips, want 1", len(counts), rt.N())
		}
		for i, c := range counts {
			want, err := single.CountConversion(ctx, c.Kind, c.Now, time.Hour, 0, c.Subjects)
			if err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if got[i][j] != want[j] {
					t.Fatalf("round %d, event %d subject %s: batched %+v, one by one %+v", round, i, c.Subjects[j].ID, got[i][j], want[j])
				}
			}
		}
	}
}
