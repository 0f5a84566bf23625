package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

func (p *program) get(t *testing.T, path, key string) (int, map[string]any) {
	t.Helper()
	return p.call(t, "GET", path, "", key)
}

// TestRedisOutageEndToEnd boots the real program on a private Redis, kills
// Redis and starts it again: the default policies keep their modes (limits
// open, OTP closed), /ops/status and /readyz say so, and service goes back
// to Redis without a restart.
func TestRedisOutageEndToEnd(t *testing.T) {
	t.Parallel() // its own redis-server
	srv := redistest.Start(t)
	const opsKey = "e2e-ops-key-0123456789abcdef"
	p := boot(t, map[string]string{
		"OTPGUARD_REDIS_URL":     srv.URL(),
		"OTPGUARD_REDIS_PREFIX":  redistest.Prefix(),
		"OTPGUARD_REDIS_TIMEOUT": "1s", // start-up must not fail on a slow -race round trip
		"OTPGUARD_API_KEYS":      "e2e-key-0123456789abcdef",
		"OTPGUARD_OPS_KEYS":      opsKey,
		"OTPGUARD_HMAC_KEY":      "0123456789abcdef0123456789abcdef",
	})
	go func() { // keep reading the log so the program never blocks on it
		for range p.lines {
		}
	}()
	if status, m := p.get(t, "/ops/status", opsKey); status != 200 || m["redis"] != "up" || m["breaker"] != "closed" || m["instances"] != float64(1) {
		t.Fatalf("healthy /ops/status: %d %v", status, m)
	}

	srv.Kill()
	for i := range 10 {
		if status, m := p.post(t, "/limits/check", `{"policy":"default","key":"user:1"}`); status != 200 || m["allowed"] != true {
			t.Fatalf("check %d with Redis down (default policy is open): %d %v", i, status, m)
		}
	}
	if status, m := p.post(t, "/otp/send", `{"phone":"+14155550100"}`); status != 503 || m["code"] != "store_unavailable" {
		t.Errorf("send with Redis down (OTP is closed): %d %v", status, m)
	}
	status, m := p.get(t, "/ops/status", opsKey)
	if status != 200 || m["breaker"] != "open" || !strings.Contains(func() string { b, _ := json.Marshal(m["in_fallback"]); return string(b) }(), "limits.default") {
		t.Errorf("outage /ops/status: %d %v", status, m)
	}
	if status, _ := p.get(t, "/readyz", ""); status != 503 {
		t.Errorf("outage /readyz: %d, want 503", status)
	}

	srv.Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p.post(t, "/limits/check", `{"policy":"default","key":"poke","cost":0}`)
		_, m := p.get(t, "/ops/status", opsKey)
		if m["breaker"] == "closed" && m["redis"] == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never recovered: %v", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, m := p.post(t, "/otp/send", `{"phone":"+14155550100"}`); status != 200 {
		t.Errorf("send after recovery: %d %v", status, m)
	}
	if status, m := p.get(t, "/readyz", ""); status != 200 || m["redis"] != "up" {
		t.Errorf("recovered /readyz: %d %v", status, m)
	}
}

func TestInstancesConfig(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"", true}, {"3", true}, {"0", true}, {"-1", false}, {"many", false}, {"100000", false}} {
		err := run(context.Background(), []string{"otpguard", "config", "check"}, env(map[string]string{"OTPGUARD_INSTANCES": tc.value}), io.Discard)
		if (err == nil) != tc.ok {
			t.Errorf("OTPGUARD_INSTANCES=%q: got %v, want ok=%v", tc.value, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "OTPGUARD_INSTANCES") {
			t.Errorf("OTPGUARD_INSTANCES=%q: error %q does not name the variable", tc.value, err)
		}
	}
}
