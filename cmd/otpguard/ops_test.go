package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// opsCall sends a request to the program with its ops key.
func (p *program) opsCall(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	return p.call(t, method, path, body, p.opsKey)
}

// TestEmbeddedOpsKey: embedded mode makes up an ops key, prints it, and it
// opens /ops while the API key does not.
func TestEmbeddedOpsKey(t *testing.T) {
	// A generous Redis budget: start-up must not fail on a CPU-starved
	// round trip to the embedded Redis while other suites run.
	p := boot(t, map[string]string{"OTPGUARD_REDIS_TIMEOUT": "1s"})
	if !strings.HasPrefix(p.opsKey, "ogo_") || p.opsKey == p.key {
		t.Fatalf("embedded mode printed no ops key of its own (got %q)", p.opsKey)
	}
	if status, _ := p.opsCall(t, "GET", "/ops/blocked", ""); status != 200 {
		t.Errorf("GET /ops/blocked with the generated ops key: %d", status)
	}
	apiOnly := *p
	apiOnly.opsKey = p.key
	if status, _ := apiOnly.opsCall(t, "GET", "/ops/blocked", ""); status != 403 {
		t.Errorf("GET /ops/blocked with the API key: %d, want 403", status)
	}
}

// TestOpsEndToEnd runs the real program on real Redis and PostgreSQL: a
// refused send shows in the blocked list and the audit trail, a deny-list
// entry refuses sends, and unblock lifts a cooldown.
func TestOpsEndToEnd(t *testing.T) {
	tg := redistest.New(t)
	p := boot(t, map[string]string{
		"OTPGUARD_REDIS_URL":        tg.URL,
		"OTPGUARD_REDIS_PREFIX":     tg.Prefix,
		"OTPGUARD_REDIS_TIMEOUT":    "2s",
		"OTPGUARD_API_KEYS":         "e2e-key-0123456789abcdef",
		"OTPGUARD_OPS_KEYS":         "e2e-ops-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":         "0123456789abcdef0123456789abcdef",
		"OTPGUARD_DATABASE_URL":     sqltest.Postgres(t),
		"OTPGUARD_DENYLIST_REFRESH": "200ms",
	})
	if status, _ := p.post(t, "/otp/send", `{"phone":"+919800000000"}`); status != 200 {
		t.Fatalf("send: %d", status)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+919800000000"}`); status != 429 {
		t.Fatalf("second send: %d %v", status, body)
	}
	status, body := p.opsCall(t, "GET", "/ops/blocked", "")
	blocks, _ := body["blocks"].([]any)
	if status != 200 || len(blocks) != 1 || blocks[0].(map[string]any)["reason"] != "cooldown" {
		t.Fatalf("blocked: %d %v", status, body)
	}
	if status, body := p.opsCall(t, "DELETE", "/ops/blocked/%2B919800000000", ""); status != 200 {
		t.Fatalf("unblock: %d %v", status, body)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+919800000000"}`); status != 200 {
		t.Fatalf("send after unblock: %d %v", status, body)
	}
	if status, body := p.opsCall(t, "POST", "/ops/denylist", `{"pattern":"+9198","reason":"e2e"}`); status != 201 {
		t.Fatalf("deny: %d %v", status, body)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+919811111111"}`); status != 403 || body["code"] != "denied" {
		t.Fatalf("send to a denied prefix: %d %v, want 403 denied", status, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := p.opsCall(t, "GET", "/ops/events?action=otp.send", "")
		events, _ := body["events"].([]any)
		if len(events) == 4 {
			if got := events[0].(map[string]any)["outcome"]; got != "denied" {
				t.Errorf("newest send event: outcome %v, want denied", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("send events: %d, want 4", len(events))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMigrateSubcommand(t *testing.T) {
	for _, engine := range []string{sqlstore.EngineSQLite, sqlstore.EnginePostgres} {
		t.Run(engine, func(t *testing.T) {
			vars := map[string]string{"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_REDIS_TIMEOUT": "1s"}
			if engine == sqlstore.EnginePostgres {
				vars["OTPGUARD_DATABASE_URL"] = sqltest.Postgres(t)
			}
			migrate := func(sub string) string {
				t.Helper()
				var out strings.Builder
				if err := run(context.Background(), []string{"otpguard", "migrate", sub}, env(vars), &out); err != nil {
					t.Fatalf("migrate %s: %v", sub, err)
				}
				return out.String()
			}
			if out := migrate("status"); !strings.Contains(out, "00001_init.sql") || !strings.Contains(out, "pending") || !strings.Contains(out, "# "+engine) {
				t.Errorf("status before up:\n%s", out)
			}
			// serve refuses the old schema when it may not migrate.
			vars["OTPGUARD_AUTO_MIGRATE"] = "false"
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, []string{"otpguard"}, env(vars), io.Discard)
			if err == nil || !errors.Is(err, sqlstore.ErrSchemaOutdated) || !strings.Contains(err.Error(), "otpguard migrate up") {
				t.Fatalf("serve on an old schema with auto-migrate off: %v, want a refusal naming `otpguard migrate up`", err)
			}
			if out := migrate("up"); strings.Contains(out, "pending") || !strings.Contains(out, "applied") {
				t.Errorf("up:\n%s", out)
			}
			if out := migrate("status"); strings.Contains(out, "pending") {
				t.Errorf("status after up:\n%s", out)
			}
			// Now it serves, still without migrating.
			p := boot(t, vars)
			if status, _ := p.post(t, "/otp/send", `{"phone":"+14155550100"}`); status != 200 {
				t.Errorf("send after migrate up: %d", status)
			}
		})
	}
	for _, args := range [][]string{{"otpguard", "migrate"}, {"otpguard", "migrate", "down"}, {"otpguard", "migrate", "up", "now"}} {
		if err := run(context.Background(), args, env(map[string]string{"OTPGUARD_DATA_DIR": t.TempDir()}), io.Discard); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: %v, want usage", args, err)
		}
	}
}

func TestOpsConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		vars map[string]string
		want string
	}{
		"retention not a duration": {map[string]string{"OTPGUARD_AUDIT_RETENTION": "a month"}, "OTPGUARD_AUDIT_RETENTION"},
		"retention too short":      {map[string]string{"OTPGUARD_AUDIT_RETENTION": "10m"}, "OTPGUARD_AUDIT_RETENTION"},
		"refresh too fast":         {map[string]string{"OTPGUARD_DENYLIST_REFRESH": "1ms"}, "OTPGUARD_DENYLIST_REFRESH"},
		"refresh too slow":         {map[string]string{"OTPGUARD_DENYLIST_REFRESH": "1h"}, "OTPGUARD_DENYLIST_REFRESH"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), []string{"otpguard", "config", "check"}, env(tc.vars), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuditRetention != 30*24*time.Hour || cfg.DenyListRefresh != 2*time.Second {
		t.Errorf("defaults: retention %s, refresh %s; want 720h and 2s", cfg.AuditRetention, cfg.DenyListRefresh)
	}
}
