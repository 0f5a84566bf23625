package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestClusterFullCoverageIsSaid: a Redis Cluster master left at
// cluster-require-full-coverage yes (Redis's default) is named by
// `otpguard config check` and by a WARN line at start-up: with it, one
// dead master stops every decision.
func TestClusterFullCoverageIsSaid(t *testing.T) {
	rc := redistest.StartCluster(t)
	ctx := context.Background()
	cc := rc.Client(t)
	m, err := cc.MasterForKey(ctx, "{+447911100000}")
	if err != nil {
		t.Fatal(err)
	}
	master := m.Options().Addr
	node := redis.NewClient(&redis.Options{Addr: master, DisableIdentity: true})
	defer node.Close()
	if err := node.ConfigSet(ctx, "cluster-require-full-coverage", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": strings.Join(rc.Addrs(), ","),
		"OTPGUARD_REDIS_PREFIX": redistest.Prefix(), "OTPGUARD_REDIS_TIMEOUT": "1s",
		"OTPGUARD_API_KEYS": "e2e-key-0123456789abcdef", "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef",
		"OTPGUARD_SMS": "console", "OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_ADDR": "127.0.0.1:0"}
	said := func(s string) bool {
		return strings.Contains(s, "cluster-require-full-coverage yes") && strings.Contains(s, master)
	}

	var out strings.Builder
	if err := run(ctx, []string{"otpguard", "config", "check"}, env(vars), &out); err != nil {
		t.Fatalf("config check: %v", err)
	}
	if !strings.Contains(out.String(), "# warning: ") || !said(out.String()) {
		t.Errorf("config check does not warn of %s's full coverage:\n%s", master, out.String())
	}

	// serve: a WARN line before it listens.
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(sctx, []string{"otpguard"}, env(vars), pw)
		pw.Close()
		done <- err
	}()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		warned := false
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if msg, _ := l["msg"].(string); l["level"] == "WARN" && said(msg) {
				warned = true
			}
			if l["msg"] == "listening" {
				url, _ := l["url"].(string)
				if r, err := http.Get(url + "/healthz"); err == nil { // serving, before it is stopped
					r.Body.Close()
				}
				found <- warned
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr) // drain: only the lines above are read
	}()
	select {
	case warned := <-found:
		if !warned {
			t.Errorf("no WARN line at start-up naming %s's cluster-require-full-coverage yes", master)
		}
	case err := <-done:
		t.Fatalf("serve stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not listen within 30s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("serve did not return within 30s of its stop")
	}
}
