package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSIGHUPReloadsPolicies: the real program reloads its policy file on
// SIGHUP; a bad file is refused and the policy in force kept.
func TestSIGHUPReloadsPolicies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	limit := func(n int) string {
		return fmt.Sprintf("limits:\n  api: {algorithm: fixed_window, limit: %d, window: 1m, on_store_error: closed}\n", n)
	}
	write(limit(5))
	p := boot(t, map[string]string{"OTPGUARD_CONFIG": path, "OTPGUARD_REDIS_TIMEOUT": "1s"})
	limitNow := func() float64 {
		t.Helper()
		status, body := p.post(t, "/limits/check", `{"policy":"api","key":"k"}`)
		if status != 200 {
			t.Fatalf("check: %d %v", status, body)
		}
		return body["decisions"].([]any)[0].(map[string]any)["limit"].(float64)
	}
	// hup signals this process (the program runs in it) and waits for
	// the log line that says how the reload went.
	hup := func(want string) map[string]any {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for {
			if m := p.next(t); m["msg"] == want {
				return m
			}
		}
	}
	if got := limitNow(); got != 5 {
		t.Fatalf("limit at start: %v, want 5", got)
	}
	write(limit(7))
	hup("policy reloaded")
	if got := limitNow(); got != 7 {
		t.Errorf("limit after SIGHUP: %v, want 7", got)
	}
	write(limit(0)) // refused by validation
	if m := hup("POLICY RELOAD FAILED: the policy in force is kept"); m["level"] != "ERROR" {
		t.Errorf("refused reload logged at %v, want ERROR", m["level"])
	}
	if got := limitNow(); got != 7 {
		t.Errorf("limit after a bad file: %v, want 7 (kept)", got)
	}
}
