package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The default budget, and the bound every call must keep when Redis is
// hurt: the budget plus a generous margin for a CPU-starved -race run.
// (The real figures are in docs/outage.md, from the benchmarks.)
const (
	budget = 10 * time.Millisecond
	bound  = 50 * time.Millisecond
)

// budgetClient is a client as otpguard builds it, with the default budget.
func budgetClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: url, Timeout: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// warm makes a few good calls so that the pool holds live connections (a
// CPU-starved round trip may miss the 10 ms budget: retry).
func warm(t *testing.T, s *store.Redis) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	ok := 0
	for ok < 3 {
		if _, err := s.Take(context.Background(), []guard.Take{fw("warm", 1000, time.Minute, 0)}); err == nil {
			ok++
		} else if time.Now().After(deadline) {
			t.Fatalf("redis never answered within %v: %v", budget, err)
		}
	}
}

// TestRedisBudgetHolds hurts a real Redis in each way it fails in
// production and checks every call fails within the budget (plus margin),
// never waiting on TCP or retrying.
func TestRedisBudgetHolds(t *testing.T) {
	tests := []struct {
		name string
		// hurt breaks Redis and returns the URL the client must use; the
		// client was warmed on it first unless cold.
		hurt func(t *testing.T, srv *redistest.Server, proxy *redistest.Proxy) (cold bool)
	}{
		{name: "killed", hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Kill()
			return false
		}},
		{name: "refused", hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Kill()
			return true
		}},
		{name: "paused", hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Pause(3 * time.Second)
			return false
		}},
		{name: "black-holed", hurt: func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) bool {
			proxy.BlackHole()
			return false
		}},
		{name: "black-holed dial", hurt: func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) bool {
			proxy.BlackHole()
			return true
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			prefix := redistest.Prefix()
			s := store.NewRedis(budgetClient(t, proxy.URL()), prefix)
			warm(t, s)
			if cold := tc.hurt(t, srv, proxy); cold {
				s = store.NewRedis(budgetClient(t, proxy.URL()), prefix)
			}
			ctx := context.Background()
			calls := map[string]func() error{
				"take": func() error {
					_, err := s.Take(ctx, []guard.Take{fw("k", 5, time.Minute, 1), tb("k", 5, 1, 1)})
					return err
				},
				"guess": func() error {
					_, err := s.GuessCode(ctx, "+14155550100")
					return err
				},
				"save": func() error { _, err := s.SaveCode(ctx, "+14155550100", []byte("mac"), time.Minute); return err },
			}
			lag := redistest.StartLagMonitor(t)
			var worst time.Duration
			for range 10 {
				for name, call := range calls {
					start := time.Now()
					err := call()
					el := time.Since(start)
					worst = max(worst, el)
					if err == nil {
						t.Fatalf("%s: succeeded against a hurt Redis", name)
					}
					if errors.Is(err, guard.ErrNotFound) {
						t.Fatalf("%s: ErrNotFound, want a store error", name)
					}
					// Allowing only for the lag a CPU-starved process
					// suffered meanwhile (redistest.LagMonitor).
					if ok, l := lag.Within(start, el, bound); !ok {
						t.Errorf("%s: took %v, want at most %v (budget %v) + %v of scheduling lag: %v", name, el, bound, budget, l, err)
					}
				}
			}
			t.Logf("slowest failing call: %v", worst)
		})
	}
}
