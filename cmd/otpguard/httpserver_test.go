package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// httpServers are OTPGUARD_HTTP_SERVER's values: the end-to-end tests
// that matter run through each.
var httpServers = []string{"net/http", "fasthttp"}

// bootOn boots the program with OTPGUARD_HTTP_SERVER=server on the Redis
// at redisURL under prefix, with the end-to-end API and HMAC keys, and
// extra settings on top.
func bootOn(t *testing.T, server, redisURL, prefix string, extra map[string]string) *program {
	t.Helper()
	env := map[string]string{
		"OTPGUARD_HTTP_SERVER":  server,
		"OTPGUARD_REDIS_URL":    redisURL,
		"OTPGUARD_REDIS_PREFIX": prefix,
		"OTPGUARD_API_KEYS":     "e2e-key-0123456789abcdef",
		"OTPGUARD_HMAC_KEY":     "0123456789abcdef0123456789abcdef",
	}
	maps.Copy(env, extra)
	return boot(t, env)
}

// TestHTTPServers: the walk-through (send, verify, cooldown, a check)
// against a shared Redis, a keyed send replayed (its answer flushed
// whole before it is stored) and a body past the route's limit (413),
// through each server.
func TestHTTPServers(t *testing.T) {
	for _, server := range httpServers {
		t.Run(strings.ReplaceAll(server, "/", "_"), func(t *testing.T) {
			tg := redistest.New(t)
			p := bootOn(t, server, tg.URL, tg.Prefix, map[string]string{"OTPGUARD_REDIS_TIMEOUT": "2s"})
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

// TestFastChecksAnswerAsEcho: the checks fasthttp serves itself
// (httpapi.Server.FastChecks) answer as echo does on net/http: the same
// requests, one program of each, the same statuses, fields and bodies
// (the request ID and Date aside): allowed, denied (Retry-After), a batch,
// a caller's request ID, a malformed body, a bad cost, one check and a
// batch at once, a body past the limit, a wrong key, ?pretty.
func TestFastChecksAnswerAsEcho(t *testing.T) {
	tg := redistest.New(t)
	answers := map[string][]string{}
	for _, server := range httpServers {
		p := bootOn(t, server, tg.URL, tg.Prefix+strings.ReplaceAll(server, "/", "_")+":", map[string]string{
			"OTPGUARD_CONFIG":             "../../docs/bench/policies.yaml",
			"OTPGUARD_LOG_ALLOWED_CHECKS": "1",
		})
		logged := make(chan string, 100)
		go func() {
			for m := range p.lines {
				if m["msg"] == "request" && m["route"] == "/limits/check" {
					logged <- fmt.Sprint(m["level"], m["status"], m["code"], m["request_id"] != "")
				}
			}
		}()
		for _, c := range []struct{ path, body, key, id string }{
			{"/limits/check", `{"policy":"once","key":"k1"}`, p.key, ""},
			{"/limits/check", `{"policy":"once","key":"k1"}`, p.key, ""}, // denied
			{"/limits/check", `{"checks":[{"policy":"wide","key":"k2"},{"policy":"fw200","key":"k3","cost":2}]}`, p.key, "caller-id-1"},
			{"/limits/check", `{"policy":"wide"`, p.key, ""},
			{"/limits/check", `{"policy":"wide","key":"k4","cost":1.5}`, p.key, ""},
			{"/limits/check", `{"policy":"nope","key":"k4"}`, p.key, ""},
			{"/limits/check", `{"policy":"wide","key":"k4","checks":[]}`, p.key, ""},
			{"/limits/check", `{"policy":"wide","key":"` + strings.Repeat("k", 17<<10) + `"}`, p.key, ""},
			{"/limits/check", `{"policy":"wide","key":"k5"}`, "not-a-key-0123456789abcdef", ""},
			{"/limits/check?pretty", `{"policy":"wide","key":"k6"}`, p.key, ""},
		} {
			answers[server] = append(answers[server], checkAnswer(t, p, c.path, c.body, c.key, c.id))
		}
		answers[server] = append(answers[server], checkMetrics(t, p))
		for range 10 { // a line per request
			select {
			case l := <-logged:
				answers[server] = append(answers[server], "log: "+l)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: fewer than 10 request lines for /limits/check", server)
			}
		}
	}
	for i, want := range answers["net/http"] {
		if got := answers["fasthttp"][i]; got != want {
			t.Errorf("request %d:\nfasthttp: %s\nnet/http: %s", i, got, want)
		}
	}
}

var msLeft = regexp.MustCompile(`"(retry_after_ms|reset_after_ms)":\d+`)

// checkAnswer is the answer to one request as text: status, the fields a
// check's answer sets, and the body with its request ID taken out.
func checkAnswer(t *testing.T, p *program, path, body, key, id string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", p.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	rid := res.Header.Get("X-Request-Id")
	if rid == "" || (id != "" && rid != id) {
		t.Errorf("%s %.40s: X-Request-Id %q (sent %q)", path, body, rid, id)
	}
	// The request ID, and the milliseconds left, which move between the
	// two programs' requests.
	text := strings.ReplaceAll(string(b), rid, "<id>")
	text = msLeft.ReplaceAllString(text, `"$1":<ms>`)
	var fields []string
	for _, k := range []string{"Content-Type", "Ratelimit-Policy", "Ratelimit", "Retry-After", "Www-Authenticate", "Content-Length"} {
		fields = append(fields, k+"="+res.Header.Get(k))
	}
	return fmt.Sprintf("%d %v %s", res.StatusCode, fields, text)
}

// checkMetrics is the program's request and decision counts of the
// checks (no latencies: they differ).
func checkMetrics(t *testing.T, p *program) string {
	t.Helper()
	res, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "otpguard_decisions_total") ||
			strings.HasPrefix(l, "otpguard_http_requests_total") && strings.Contains(l, "/limits/check") ||
			strings.HasPrefix(l, "otpguard_http_request_duration_seconds_count") && strings.Contains(l, "/limits/check") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		t.Errorf("no check metrics in /metrics")
	}
	return strings.Join(keep, "\n")
}

// TestLockedOutBehindProxy: an address that has spent its wrong API keys
// through a trusted proxy (X-Forwarded-For) is refused even with a good
// key, and another address behind the same proxy is not: on fasthttp the
// check served natively reads the caller's address as echo does.
func TestLockedOutBehindProxy(t *testing.T) {
	for _, server := range httpServers {
		t.Run(strings.ReplaceAll(server, "/", "_"), func(t *testing.T) {
			tg := redistest.New(t)
			p := bootOn(t, server, tg.URL, tg.Prefix, map[string]string{"OTPGUARD_TRUSTED_PROXIES": "127.0.0.1/32"})
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
		})
	}
}
