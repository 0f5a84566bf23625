package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// bootOn boots the program on the Redis at redisURL under prefix, with
// the end-to-end API and HMAC keys, and extra settings on top.
func bootOn(t *testing.T, redisURL, prefix string, extra map[string]string) *program {
	t.Helper()
	env := map[string]string{
		"OTPGUARD_REDIS_URL":    redisURL,
		"OTPGUARD_REDIS_PREFIX": prefix,
		"OTPGUARD_API_KEYS":     "e2e-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":     "0123456789abcdef0123456789abcdef",
	}
	maps.Copy(env, extra)
	return boot(t, env)
}

// TestSharedRedisWalkThrough: the walk-through (send, verify, cooldown, a
// check) against a shared Redis, a keyed send replayed and a body past the
// route's limit (413).
func TestSharedRedisWalkThrough(t *testing.T) {
	tg := redistest.New(t)
	p := bootOn(t, tg.URL, tg.Prefix, map[string]string{"OTPGUARD_REDIS_TIMEOUT": "2s"})
	walkThrough(t, p)
	keyedSendReplays(t, p)
	bigBody(t, p)
}

// TestHTTPServerSetting: net/http is the one server; a deployment that
// still asks for fasthttp is refused at start-up with a message naming
// what serves instead, and the process never listens.
func TestHTTPServerSetting(t *testing.T) {
	for _, c := range []struct {
		value string
		want  string // in the error; "" when it starts
	}{
		{"net/http", ""},
		{"fasthttp", "net/http"},
		{"nginx", "net/http"},
	} {
		t.Run(strings.ReplaceAll(c.value, "/", "_"), func(t *testing.T) {
			env := map[string]string{"OTPGUARD_HTTP_SERVER": c.value, "OTPGUARD_ADDR": "127.0.0.1:0", "OTPGUARD_DATA_DIR": t.TempDir()}
			if c.want == "" {
				p := boot(t, env)
				go drainLines(p)
				return
			}
			var out strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, []string{"otpguard"}, func(k string) string { return env[k] }, &out)
			if err == nil || !strings.Contains(err.Error(), "OTPGUARD_HTTP_SERVER") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OTPGUARD_HTTP_SERVER=%s: run returned %v, want an error naming the setting and %q", c.value, err, c.want)
			}
			if strings.Contains(out.String(), `"msg":"listening"`) {
				t.Errorf("OTPGUARD_HTTP_SERVER=%s: the program listened before refusing", c.value)
			}
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

// TestLockedOutBehindProxy: an address that has spent its wrong API keys
// through a trusted proxy (X-Forwarded-For) is refused even with a good
// key, and another address behind the same proxy is not.
func TestLockedOutBehindProxy(t *testing.T) {
	tg := redistest.New(t)
	p := bootOn(t, tg.URL, tg.Prefix, map[string]string{"OTPGUARD_TRUSTED_PROXIES": "127.0.0.1/32"})
	go drainLines(p)
	check := func(key, from string) int {
		req, _ := http.NewRequest("POST", p.url+"/limits/check", strings.NewReader(`{"policy":"default","key":"u1"}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Forwarded-For", from)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for range 10 {
		check("wrong-key-0123456789abcdef", "198.51.100.7")
	}
	if s := check(p.key, "198.51.100.7"); s != http.StatusTooManyRequests {
		t.Errorf("a good key from the locked-out address: %d, want 429", s)
	}
	if s := check(p.key, "198.51.100.8"); s != http.StatusOK {
		t.Errorf("a good key from another address behind the proxy: %d, want 200", s)
	}
}
