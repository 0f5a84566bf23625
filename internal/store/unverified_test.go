package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// unverifiedVolume is an untrusted send's volume take for country KZ at
// hour h: velocity floor 50, factor 3, the unverified budget's floor
// ufloor (share 0.1, normal 80 % while unknown).
func unverifiedVolume(h int64, ufloor int64) guard.VolumeTake {
	return guard.VolumeTake{Key: limit.Key{Space: "otp:vel", ID: "KZ", Name: "h"},
		Quarantine: limit.Key{Space: "otp:vel", ID: "KZ", Name: "quarantine"},
		Now:        time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 50, QFloor: 5, Factor: 3, HistoryMinSends: 20,
		TrustedKey: limit.Key{Space: "otp:vel", ID: "KZ", Name: "t"}, TFloor: 100, TFactor: 3,
		Unverified: guard.UnverifiedTake{Floor: ufloor, Share: 0.1, NormalDefault: 800, NormalMin: 200}}
}

// TestUnverifiedBudget drives the unverified budget through one country's
// hours: sends run at most the budget ahead of their verifies (each
// verify backs 1 / normal sends), a refusal says the budget, a trusted
// send is not held by it, the hour's verified sends raise the hour's limit
// (the trusted tier's too),
// a quarantine cuts the budget to a tenth, and a new hour starts afresh.
func TestUnverifiedBudget(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix() / 3600
			take := func(v guard.VolumeTake) guard.VolumeResult {
				t.Helper()
				r, err := s.Velocity.TakeVolume(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			sendAll := func(v guard.VolumeTake) (n int64, last guard.VolumeResult) {
				t.Helper()
				for {
					if last = take(v); !last.Allowed {
						return n, last
					}
					n++
				}
			}
			verify := func(h int64, n int) {
				t.Helper()
				for range n {
					if err := s.Velocity.CountVerified(ctx, limit.Key{Space: "otp:vel", ID: "KZ", Name: "h"}, limit.Key{}, h, 26*time.Hour); err != nil {
						t.Fatal(err)
					}
				}
			}
			// No history: 5 sends nobody verified, then refused with the budget.
			n, r := sendAll(unverifiedVolume(h, 5))
			if n != 5 || r.Unverified != 5 || r.Limit != 50 {
				t.Fatalf("hour 0: %d sent, last %+v; want 5 sent, refused by the budget 5 under the limit 50", n, r)
			}
			// A trusted send is not held by it.
			tv := unverifiedVolume(h, 5)
			tv.Trusted = true
			if r := take(tv); !r.Allowed || !r.Trusted {
				t.Fatalf("trusted send: %+v, want allowed in the trusted tier", r)
			}
			// The trusted tier grows within the hour from its own verified
			// sends too: 60 trusted verifies of its 100 lift its floor 100
			// to 3 x 60.
			if n, r := sendAll(tv); n != 99 || r.Limit != 100 {
				t.Fatalf("trusted tier: %d more sent, last %+v; want its floor 100 in all", n, r)
			}
			for range 60 {
				if err := s.Velocity.CountVerified(ctx, tv.TrustedKey, limit.Key{}, h, 26*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if n, r := sendAll(tv); n != 80 || r.Limit != 180 {
				t.Fatalf("trusted tier after 60 verifies: %d more sent, last %+v; want 80 more, the limit 3 x 60", n, r)
			}
			// 4 verifies back 4 / 0.8 = 5 sends.
			verify(h, 4)
			if n, r = sendAll(unverifiedVolume(h, 5)); n != 5 || r.Unverified != 5 {
				t.Fatalf("after 4 verifies: %d more sent (%+v), want 5", n, r)
			}
			// The hour's verified sends raise its limit: 44 verifies back
			// 55 sends, so the budget allows 60 in all, past the floor 50,
			// under 3 x min(sends, verifies) = 132.
			verify(h, 40)
			if n, r = sendAll(unverifiedVolume(h, 5)); n != 50 || r.Unverified != 5 || r.Limit != 132 {
				t.Fatalf("after 44 verifies: %d more sent (%+v), want 50 more, the limit 3 x 44", n, r)
			}
			// A quarantine cuts the budget to a tenth (at least 1).
			q := unverifiedVolume(h+1, 5)
			if err := s.Velocity.Quarantine(ctx, q.Quarantine, q.Now.Add(time.Hour), time.Hour); err != nil {
				t.Fatal(err)
			}
			if n, r = sendAll(q); n != 1 || r.Unverified != 1 || !r.Quarantined {
				t.Fatalf("quarantined hour: %d sent, last %+v; want 1, the budget cut to 1", n, r)
			}
			// Off: only the velocity limit (its floor 50, a tenth while
			// quarantined, and the baseline the verified hour earned).
			if r = take(unverifiedVolume(h+1, 0)); !r.Allowed || r.Unverified != 0 {
				t.Fatalf("budget off: %+v, want allowed", r)
			}
		})
	}
}

// TestUnverifiedBudgetExact: 60 concurrent untrusted sends of one country
// through two clients (two instances) on a real Redis, with the budget
// 20: exactly 20 are allowed; on Redis Cluster too.
func TestUnverifiedBudgetExact(t *testing.T) {
	clients := map[string]func(t *testing.T) []*store.Redis{
		"redis": func(t *testing.T) []*store.Redis {
			tg := redistest.New(t)
			return []*store.Redis{store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix), store.NewRedis(redistest.Client(t, tg.URL), tg.Prefix)}
		},
		"cluster": func(t *testing.T) []*store.Redis {
			_, _, _, prefix := clusterStore(t)
			out := make([]*store.Redis, 2)
			for i := range out {
				u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: redistest.SharedCluster(t).Addrs(), Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { u.Close() })
				out[i] = store.NewClusterRedis(u, prefix)
			}
			return out
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			stores := mk(t)
			h := time.Now().Unix() / 3600
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					v := unverifiedVolume(h, 20)
					_, vres, err := stores[i%2].Counters.TakeSend(context.Background(), nil, &v)
					if err != nil {
						t.Error(err)
						return
					}
					if vres.Allowed {
						allowed.Add(1)
					} else if vres.Unverified != 20 {
						t.Errorf("refused %+v, want by the budget 20", vres)
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != 20 {
				t.Errorf("allowed: %d, want exactly the budget 20", got)
			}
		})
	}
}

// TestSolvedCapBackedByVerifies: with the unverified budget on, the solved
// tier's cap (floor 5 here, no history) holds the solved sends their
// verifies do not back: 5 unverified, then 4 verifies back 5 more; each
// solution is taken once. With it off the cap counts sends alone.
func TestSolvedCapBackedByVerifies(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			h := time.Now().Unix() / 3600
			solvedKey := limit.Key{Space: "otp:vel", ID: "UZ", Name: "solved"}
			n := 0
			take := func(budget bool) guard.VolumeResult {
				t.Helper()
				n++
				v := guard.VolumeTake{Key: solvedKey, Quarantine: limit.Key{Space: "otp:vel", ID: "UZ", Name: "solvedcut"},
					Now: time.Unix(h*3600+60, 0), Hour: h, Lookback: 24, Floor: 5, QFloor: 1, Factor: 1,
					Solved: &guard.SolvedUse{Used: limit.Key{Space: "otp:vel", ID: "UZ", Name: fmt.Sprintf("used:%d", n)},
						TTL: time.Minute, Base: limit.Key{Space: "otp:vel", ID: "UZ", Name: "h"}}}
				if budget {
					v.Unverified = guard.UnverifiedTake{Floor: 20, Share: 0.1, NormalDefault: 800, NormalMin: 200}
				}
				r, err := s.Velocity.TakeVolume(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			sendAll := func(budget bool) (sent int) {
				for take(budget).Allowed {
					sent++
				}
				return sent
			}
			if got := sendAll(true); got != 5 {
				t.Fatalf("no verifies: %d solved sends, want the cap 5", got)
			}
			for range 4 {
				if err := s.Velocity.CountVerified(ctx, solvedKey, limit.Key{}, h, 2*time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if got := sendAll(true); got != 5 {
				t.Fatalf("after 4 verifies: %d more, want 4 / 0.8 = 5", got)
			}
			if got := sendAll(false); got != 0 {
				t.Fatalf("budget off: %d more past the cap's 5 sends, want 0", got)
			}
		})
	}
}
