package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
)

// TestVelocityBaseline drives the country velocity script through hours of
// the caller's clock: a country without history gets the floor, verified
// hours earn a baseline (an hour's credit is its verified sends) and the
// country's normal conversion, unverified ones earn nothing, hours past the lookback are forgotten, and
// a quarantine cuts the floor until its time.
func TestVelocityBaseline(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			key := limit.Key{Space: "otp:vel", ID: "GB", Name: "h"}
			qkey := limit.Key{Space: "otp:vel", ID: "GB", Name: "quarantine"}
			h0 := time.Now().Unix() / 3600
			take := func(h int64) guard.VolumeResult {
				t.Helper()
				r, err := s.Velocity.TakeVolume(ctx, guard.VolumeTake{Key: key, Quarantine: qkey, Now: time.Unix(h*3600+60, 0),
					Hour: h, Lookback: 24, Floor: 10, QFloor: 1, Factor: 3, HistoryMinSends: 20})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			fill := func(h int64, verified int) (sent int64) {
				for take(h).Allowed {
					sent++
				}
				for range verified {
					if err := s.Velocity.CountVerified(ctx, key, limit.Key{}, h, 26*time.Hour); err != nil {
						t.Fatal(err)
					}
				}
				return sent
			}
			// Hour 0: no history, the floor.
			if got := fill(h0, 10); got != 10 {
				t.Fatalf("hour 0: %d sent, want the floor 10", got)
			}
			normal := func(h int64) (float64, bool) {
				t.Helper()
				n, known, err := s.Velocity.NormalConversion(ctx, key, h)
				if err != nil {
					t.Fatal(err)
				}
				return n, known
			}
			if _, known := normal(h0); known {
				t.Fatalf("hour 0: a normal conversion without history")
			}
			// Hour 1: baseline 10 (10 sends, all verified): 30.
			if got := fill(h0+1, 12); got != 30 {
				t.Fatalf("hour 1: %d sent, want 3 x 10", got)
			}
			// Hour 2: hour 1 had 30 sends but 12 verifies: credit 12, 3 x 12 =
			// 36. The normal: 22 verified of 40 sent.
			if got := fill(h0+2, 0); got != 36 {
				t.Fatalf("hour 2: %d sent, want 3 x 12", got)
			}
			if n, known := normal(h0 + 2); !known || n != 0.55 {
				t.Fatalf("hour 2: normal conversion %v (known %v), want 0.55", n, known)
			}
			// Hour 3: hour 2 was never verified and taught nothing: still 36.
			r := take(h0 + 3)
			if !r.Allowed || r.Baseline != 12 || r.Limit != 36 {
				t.Fatalf("hour 3: %+v, want allowed, baseline 12, limit 36", r)
			}
			if err := s.Velocity.RefundVolume(ctx, key, limit.Key{}, time.Unix((h0+3)*3600+60, 0)); err != nil {
				t.Fatal(err)
			}
			// A day later the history is past the lookback: the floor again.
			if r := take(h0 + 30); r.Limit != 10 || r.Baseline != 0 {
				t.Fatalf("after the lookback: %+v, want limit 10, baseline 0", r)
			}
			// Quarantined until hour 31: floor 1.
			if err := s.Velocity.Quarantine(ctx, qkey, time.Unix((h0+31)*3600, 0), time.Hour); err != nil {
				t.Fatal(err)
			}
			if r := take(h0 + 30); r.Allowed || !r.Quarantined || r.Limit != 1 {
				t.Fatalf("quarantined: %+v, want refused at limit 1", r)
			}
			if r := take(h0 + 31); !r.Allowed || r.Quarantined {
				t.Fatalf("after the quarantine: %+v, want allowed", r)
			}
		})
	}
}

// TestVelocityExactUnderConcurrency: 40 concurrent senders against a floor
// of 25 on a real Redis: exactly 25 are counted.
func TestVelocityExactUnderConcurrency(t *testing.T) {
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	key := limit.Key{Space: "otp:vel", ID: "NG", Name: "h"}
	h := time.Now().Unix() / 3600
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			r, err := s.Velocity.TakeVolume(context.Background(), guard.VolumeTake{Key: key,
				Quarantine: limit.Key{Space: "otp:vel", ID: "NG", Name: "quarantine"}, Now: time.Now(),
				Hour: h, Lookback: 168, Floor: 25, QFloor: 2, Factor: 3, HistoryMinSends: 200})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 25 {
		t.Errorf("allowed: got %d, want exactly 25", got)
	}
}

// TestVelocityMinuteShare: with a minute share, one minute of the clock
// takes at most max(floor, share x the hour's limit); the hour's limit
// still holds over the minutes, and a refund gives back both.
func TestVelocityMinuteShare(t *testing.T) {
	b := backends(t)["redis"](t)
	s := store.NewRedis(b.rdb, b.prefix)
	ctx := context.Background()
	key := limit.Key{Space: "otp:vel", ID: "FR", Name: "h"}
	h0 := time.Now().Unix() / 3600
	take := func(h int64, minute int) guard.VolumeResult {
		t.Helper()
		r, err := s.Velocity.TakeVolume(ctx, guard.VolumeTake{Key: key, Quarantine: limit.Key{Space: "otp:vel", ID: "FR", Name: "quarantine"},
			Now: time.Unix(h*3600+int64(minute)*60, 0), Hour: h, Lookback: 24, Floor: 10, QFloor: 1, Factor: 3, HistoryMinSends: 200, MinuteShare: 0.1})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fill := func(h int64, minute int) (n int) {
		for take(h, minute).Allowed {
			n++
		}
		return n
	}
	if got := fill(h0, 0); got != 10 {
		t.Fatalf("hour 0 minute 0: %d, want the floor 10", got)
	}
	for range 10 {
		if err := s.Velocity.CountVerified(ctx, key, limit.Key{}, h0, 26*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Hour 1: limit 30, each minute max(10, 3) = 10.
	for m, want := range []int{10, 10, 10, 0} {
		if got := fill(h0+1, m); got != want {
			t.Fatalf("hour 1 minute %d: %d sent, want %d", m, got, want)
		}
	}
	if r := take(h0+1, 3); r.Count != 30 || r.Limit != 30 {
		t.Fatalf("hour 1 full: %+v, want count 30, limit 30", r)
	}
	if err := s.Velocity.RefundVolume(ctx, key, limit.Key{}, time.Unix((h0+1)*3600+2*60, 0)); err != nil {
		t.Fatal(err)
	}
	if got := fill(h0+1, 3); got != 1 {
		t.Fatalf("after a refund: %d sent, want 1", got)
	}
}
