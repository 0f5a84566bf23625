package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestSentinelFailover: otpguard in sentinel mode; the master is killed
// mid-run. Every request still gets an answer (the policies' fallbacks),
// and once the sentinels promote the replica, exact shared limits resume
// on the new master. That no answer waits more than the timeout is the
// client's settings (store.TestRedisClientsHoldTheTimeout covers sentinel
// mode), not a stopwatch here: the slowest answer is only logged.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // its own sentinels and servers; the program gets its settings, not the environment
	s := redistest.StartSentinel(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("limits:\n  api: {algorithm: fixed_window, limit: 20, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A generous timeout, as in every exactness test: under -race on a busy
	// CPU a healthy call can take 100+ ms, and a call over its timeout is
	// decided by the fallback, on top of Redis. A dead master still fails
	// fast (connection refused).
	const timeout = time.Second
	p := boot(t, map[string]string{
		"OTPGUARD_REDIS_MODE":    "sentinel",
		"OTPGUARD_REDIS_ADDRS":   fmt.Sprint(s.Addrs()[0], ",", s.Addrs()[1], ",", s.Addrs()[2]),
		"OTPGUARD_REDIS_MASTER":  redistest.SentinelMaster,
		"OTPGUARD_REDIS_PREFIX":  redistest.Prefix(),
		"OTPGUARD_REDIS_TIMEOUT": timeout.String(),
		"OTPGUARD_API_KEYS":      "e2e-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":      "0123456789abcdef0123456789abcdef",
		"OTPGUARD_CONFIG":        policy,
	})
	go func() { // drain the log
		for range p.lines {
		}
	}()
	exact := func(key string) {
		t.Helper()
		statuses := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				st, _ := p.post(t, "/limits/check", `{"policy":"api","key":"`+key+`"}`)
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if statuses[200] != 20 || statuses[429] != 20 {
			t.Fatalf("40 concurrent checks of %s: %v, want exactly 20 x 200 and 20 x 429", key, statuses)
		}
	}
	exact("before")

	old, err := s.MasterAddr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.Master.Kill()
	killed := time.Now()

	// Keep asking until the sentinels have promoted the replica and
	// otpguard decides in Redis again; every request must be answered.
	var worst time.Duration
	promoted := false
	for i := 0; ; i++ {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no promotion seen within 30s of killing the master")
		}
		start := time.Now()
		st, body := p.post(t, "/limits/check", fmt.Sprintf(`{"policy":"api","key":"during-%d"}`, i))
		el := time.Since(start)
		worst = max(worst, el)
		if st != 200 {
			t.Fatalf("check during failover: %d %v, want 200 (open: the split limit)", st, body)
		}
		st, body = p.post(t, "/otp/send", fmt.Sprintf(`{"phone":"+9198000%05d"}`, i))
		if st != 200 && st != 503 {
			t.Fatalf("OTP send during failover: %d %v, want 200 or 503 store_unavailable (closed)", st, body)
		}
		if !promoted {
			if now, err := s.MasterAddr(context.Background()); err == nil && now != old {
				promoted = true
				t.Logf("replica %s promoted %s after the kill", now, time.Since(killed).Round(100*time.Millisecond))
			}
		}
		if promoted && decidedInRedis(t, p, body) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("back on Redis %s after the kill; slowest answer meanwhile %s", time.Since(killed).Round(100*time.Millisecond), worst)
	exact("after")
}

// decidedInRedis reports whether otpguard is deciding in Redis again: an
// OTP send (closed policy) was not refused for the store, and /readyz says
// Redis is up with the breaker closed.
func decidedInRedis(t *testing.T, p *program, sendBody map[string]any) bool {
	if sendBody["code"] == "store_unavailable" {
		return false
	}
	st, body := p.get(t, "/readyz", "")
	return st == 200 && body["redis"] == "up" && body["breaker"] == "closed"
}
