package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// refundOf is t as a caller hands it back to Refund: with the window its
// hit counted in (res.WindowID).
func refundOf(t limit.Take, res limit.Result) limit.Take {
	t.WindowID = res.WindowID
	return t
}

// TestRefundGivesBackInItsWindowOnly: a refund that names its window
// gives back there, never below zero, and never in a window that started
// after the hit's ended (another request's hit would be taken away).
func TestRefundGivesBackInItsWindowOnly(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			start := time.Now()
			if b.mini != nil {
				b.mini.SetTime(start) // frozen: TTLs move only with FastForward
			}
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			refund := func(takes ...limit.Take) {
				t.Helper()
				if err := s.Refund(ctx, takes); err != nil {
					t.Fatalf("Refund: %v", err)
				}
			}
			count := func(id string) int64 {
				t.Helper()
				return take1(t, s, fw(id, 5, time.Minute, 0)).Count
			}

			// In its window: given back, never below zero.
			w := fw("same", 5, time.Minute, 1)
			first := take1(t, s, w)
			take1(t, s, w)
			if first.WindowID == 0 {
				t.Fatalf("WindowID = 0, want the window named")
			}
			refund(refundOf(w, first))
			if got := count("same"); got != 1 {
				t.Errorf("count after a refund in its window = %d, want 1", got)
			}
			refund(refundOf(w, first), refundOf(w, first))
			if got := count("same"); got != 0 {
				t.Errorf("count after refunding more than was counted = %d, want 0", got)
			}

			// The hit's window ends and another starts: its refund gives
			// nothing back there.
			short := fw("restart", 5, 50*time.Millisecond, 1)
			old := take1(t, s, short)
			key := b.prefix + "lim:t:{restart}:fw"
			if b.mini != nil { // the clock and the TTLs move together, as app's driveClock has them
				b.mini.SetTime(start.Add(time.Second))
				b.mini.FastForward(time.Second)
			} else {
				for n, _ := b.rdb.Exists(ctx, key).Result(); n != 0; n, _ = b.rdb.Exists(ctx, key).Result() {
					time.Sleep(20 * time.Millisecond)
				}
			}
			now := take1(t, s, short)
			if now.Count != 1 || now.WindowID == old.WindowID {
				t.Fatalf("after the window ended: count %d window %d (old %d), want 1 in another window", now.Count, now.WindowID, old.WindowID)
			}
			refund(refundOf(short, old))
			if got, _ := b.rdb.Get(ctx, key).Int64(); got != 1 {
				t.Errorf("count after refunding the ended window's hit = %d, want 1 (the new window's hit kept)", got)
			}
			refund(refundOf(short, now))
			if got, _ := b.rdb.Get(ctx, key).Int64(); got != 0 {
				t.Errorf("count after refunding the new window's hit = %d, want 0", got)
			}
		})
	}
}

// TestRefundExactAcrossClients: hits and their refunds from several
// clients (standing in for instances) at once settle at exactly the hits
// not refunded.
func TestRefundExactAcrossClients(t *testing.T) {
	b := backends(t)["redis"](t)
	const clients, hits = 4, 40
	ctx := context.Background()
	var wg sync.WaitGroup
	for range clients {
		s := store.NewRedis(redistest.Client(t, "redis://"+b.rdb.Options().Addr), b.prefix)
		for j := range hits {
			wg.Go(func() {
				w := fw("many", 1000, time.Minute, 1)
				res, err := s.Take(ctx, []limit.Take{w})
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if j%2 == 0 {
					if err := s.Refund(ctx, []limit.Take{refundOf(w, res[0])}); err != nil {
						t.Errorf("Refund: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got, want := take1(t, store.NewRedis(b.rdb, b.prefix), fw("many", 1000, time.Minute, 0)).Count, int64(clients*hits/2); got != want {
		t.Fatalf("count = %d, want %d (hits not refunded)", got, want)
	}
}

// TestClusterRefundOfANumberStaysInItsWindow: on Redis Cluster, a number's
// cooldown and per-number window (one slot) are given back together in
// the windows their hits counted in, and not in windows started since.
func TestClusterRefundOfANumberStaysInItsWindow(t *testing.T) {
	s, rdb, _, prefix := clusterStore(t)
	ctx := context.Background()
	const phone = "+919800000000"
	cooldown := limit.Take{Key: limit.Key{Space: "otp", ID: phone, Name: "cooldown"}, Algorithm: limit.FixedWindow, Limit: 1, Window: 50 * time.Millisecond, Cost: 1}
	sends := limit.Take{Key: limit.Key{Space: "otp", ID: phone, Name: "sends"}, Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute, Cost: 1}
	takes := []limit.Take{cooldown, sends}
	get := func(name string) int64 {
		t.Helper()
		n, _ := rdb.Get(ctx, prefix+"otp:{"+phone+"}:"+name).Int64()
		return n
	}
	first, err := s.Take(ctx, takes)
	if err != nil {
		t.Fatal(err)
	}
	// The cooldown's window ends and the next send starts another.
	for n, _ := rdb.Exists(ctx, prefix+"otp:{"+phone+"}:cooldown").Result(); n != 0; n, _ = rdb.Exists(ctx, prefix+"otp:{"+phone+"}:cooldown").Result() {
		time.Sleep(20 * time.Millisecond)
	}
	second, err := s.Take(ctx, takes)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Refund(ctx, []limit.Take{refundOf(cooldown, first[0]), refundOf(sends, first[1])}); err != nil {
		t.Fatal(err)
	}
	if cd, n := get("cooldown"), get("sends"); cd != 1 || n != 1 {
		t.Errorf("after the first send's refund: cooldown %d sends %d, want 1 1 (the new cooldown window's hit kept)", cd, n)
	}
	if err := s.Refund(ctx, []limit.Take{refundOf(cooldown, second[0]), refundOf(sends, second[1])}); err != nil {
		t.Fatal(err)
	}
	if cd, n := get("cooldown"), get("sends"); cd != 0 || n != 0 {
		t.Errorf("after the second send's refund: cooldown %d sends %d, want 0 0", cd, n)
	}
}
