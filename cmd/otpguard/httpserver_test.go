package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// httpServers are OTPGUARD_HTTP_SERVER's values: the end-to-end tests
// that matter run through each.
var httpServers = []string{"net/http", "fasthttp"}

// TestHTTPServers: the walk-through (send, verify, cooldown, a check)
// against a shared Redis, a keyed send replayed (its answer flushed
// whole before it is stored) and a body past the route's limit (413),
// through each server.
func TestHTTPServers(t *testing.T) {
	for _, server := range httpServers {
		t.Run(strings.ReplaceAll(server, "/", "_"), func(t *testing.T) {
			tg := redistest.New(t)
			p := boot(t, map[string]string{
				"OTPGUARD_HTTP_SERVER":   server,
				"OTPGUARD_REDIS_URL":     tg.URL,
				"OTPGUARD_REDIS_PREFIX":  tg.Prefix,
				"OTPGUARD_REDIS_TIMEOUT": "2s",
				"OTPGUARD_API_KEYS":      "e2e-key-0123456789abcdef",
				"OTPGUARD_HMAC_KEY":      "0123456789abcdef0123456789abcdef",
			})
			if p.server != server {
				t.Fatalf("listening line says server %q, want %q", p.server, server)
			}
			walkThrough(t, p)
			keyedSendReplays(t, p)
			bigBody(t, p)
		})
	}
}

// keyedSendReplays: the same keyed send twice: one send, the second
// answer the first's, marked replayed.
func keyedSendReplays(t *testing.T, p *program) {
	t.Helper()
	send := func() (*http.Response, string) {
		req, _ := http.NewRequest("POST", p.url+"/otp/send", strings.NewReader(`{"phone":"+14155550177"}`))
		req.Header.Set("Authorization", "Bearer "+p.key)
		req.Header.Set("Idempotency-Key", "e2e-keyed-send-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	first, b1 := send()
	second, b2 := send()
	if first.StatusCode != 200 || second.StatusCode != 200 || b1 != b2 || second.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed send twice: %d %s / %d %s (replayed %q), want the same 200 answer replayed",
			first.StatusCode, b1, second.StatusCode, b2, second.Header.Get("Idempotent-Replayed"))
	}
	if first.Header.Get("X-Request-Id") == "" {
		t.Errorf("the keyed send's answer has no X-Request-Id")
	}
}

// bigBody: a check past the 16 KiB body limit is 413 body_too_large, as
// problem details with its request ID.
func bigBody(t *testing.T, p *program) {
	t.Helper()
	body := `{"policy":"default","key":"` + strings.Repeat("k", 17<<10) + `"}`
	status, m := p.post(t, "/limits/check", body)
	if status != http.StatusRequestEntityTooLarge || m["code"] != "body_too_large" || m["request_id"] == nil {
		t.Errorf("a 17 KiB check: %d %v, want 413 body_too_large with a request_id", status, m)
	}
}
