package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
)

func TestBody(t *testing.T) {
	c := &Config{Policy: "api", Keys: 3, KeyPrefix: "k:", Cost: 1, Batch: 1}
	for _, tc := range []struct {
		name  string
		batch int
		i     uint64
		want  string
	}{
		{"one check", 1, 4, `{"policy":"api","key":"k:1","cost":1}`},
		{"batch wraps round the keys", 2, 1, `{"checks":[{"policy":"api","key":"k:2","cost":1},{"policy":"api","key":"k:0","cost":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Batch = tc.batch
			if got := string(c.body(tc.i)); got != tc.want {
				t.Errorf("body(%d) = %s, want %s", tc.i, got, tc.want)
			}
		})
	}
}

func TestTargetsLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		url    string
		remote bool
		ok     bool
	}{
		{"http://127.0.0.1:8080", false, true},
		{"http://localhost:8080", false, true},
		{"http://[::1]:8080", false, true},
		{"http://10.0.0.5:8080", false, false},
		{"https://otpguard.example.com", false, false},
		{"https://otpguard.example.com", true, true},
		{"ftp://127.0.0.1", false, false},
		{"127.0.0.1:8080", false, false},
	} {
		err := checkTarget("-url", tc.url, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("checkTarget(%q, allowRemote=%v) = %v, want ok=%v", tc.url, tc.remote, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:6379", true},
		{"redis://127.0.0.1:6379/0", true},
		{"redis://redis.internal:6379/0", false},
		{"6379", false},
	} {
		_, err := redisAddr(tc.addr, false)
		if (err == nil) != tc.ok {
			t.Errorf("redisAddr(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestParseBenchCSV(t *testing.T) {
	out := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA abc 1 x:{__rand_int__}","35087.72","0.750","0.480","0.623","1.927","4.063","4.479"
`
	r, err := parseBenchCSV([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 35087.72 || r.P99 != "4.063" {
		t.Errorf("got %+v, want rps 35087.72, p99 4.063", r)
	}
	if _, err := parseBenchCSV([]byte("Error: connection refused\n")); err == nil {
		t.Error("garbage parsed without an error")
	}
}

// The whole command against an in-process otpguard (on miniredis): it
// stops by itself and prints the figures. The service is built by app.New
// on its embedded defaults.
func TestRunShortAttack(t *testing.T) {
	env := map[string]string{"OTPGUARD_API_KEYS": "load-test-key-0123456789", "OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_LOG_LEVEL": "error"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard)) // the embedded defaults
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	h := a.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	var out bytes.Buffer
	args := []string{"otpguard-load", "-url", srv.URL, "-rate", "200", "-duration", "500ms", "-keys", "2", "-batch", "2"}
	env = map[string]string{"OTPGUARD_API_KEY": "load-test-key-0123456789"}
	if err := run(context.Background(), args, func(k string) string { return env[k] }, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"attacking     " + srv.URL + "/limits/check at 200/s for 500ms", "status codes  200: ", "429: ", "p999", "server        ", "from the fallback (0.00%)", "server CPU    "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A wrong key fails at the preflight with the server's reason.
	env["OTPGUARD_API_KEY"] = "wrong-key-0123456789abc"
	err = run(context.Background(), args, func(k string) string { return env[k] }, &out)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("run with a wrong key: err = %v, want a 401 from the preflight", err)
	}
}
