package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkHandlerCheck is otpguard's own cost of one POST /limits/check,
// without the network to the caller: the echo handler (auth, body, JSON,
// headers, metrics) with a real Redis behind it, built by app.New as the
// binary builds it. Compare with the load command's latency to see what HTTP and
// the load generator add.
//
//	go test -run '^$' -bench HandlerCheck -benchtime 3s ./cmd/otpguard-load/
func BenchmarkHandlerCheck(b *testing.B) {
	for _, batch := range []int{1, 2, 10} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			h, rt := benchHandler(b)
			c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: batch}
			i := uint64(0)
			var cpu0 time.Duration
			for b.Loop() {
				if i == 0 {
					rt.Reset()
					cpu0 = processCPU()
				}
				if w := postCheck(h, c, i); w.Code != http.StatusOK {
					b.Fatalf("request %d: %d %s", i, w.Code, w.Body)
				}
				i++
			}
			b.ReportMetric(float64(rt.N())/float64(b.N), "roundtrips/op")
			b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkHandlerCheckParallel is BenchmarkHandlerCheck from many
// goroutines: the handler's throughput on this machine's cores, Redis
// sharing them.
func BenchmarkHandlerCheckParallel(b *testing.B) {
	h, rt := benchHandler(b)
	c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: 1}
	var next atomic.Uint64
	b.SetParallelism(8)
	b.ResetTimer()
	rt.Reset()
	cpu0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if w := postCheck(h, c, next.Add(1)); w.Code != http.StatusOK {
				b.Errorf("%d %s", w.Code, w.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(rt.N())/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
}

// processCPU is the CPU time this process has used (user and system): per
// operation it is otpguard's own cost, Redis being another process, and it
// varies less than the wall time on a busy machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchKey = "bench-key-0123456789abcdef"

// postCheck sends request i of c (a POST /limits/check) to h, as an app
// server would, without the network.
func postCheck(h http.Handler, c *Config, i uint64) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/limits/check", strings.NewReader(string(c.body(i))))
	req.Header.Set("Authorization", "Bearer "+benchKey)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// benchHandler is the service every benchmark of this package measures:
// built by app.New from the environment a production instance would have
// (shared Redis, so OTPGUARD_SMS must be chosen), with opts, and a policy
// "api" that never denies. TestBenchmarkSetups builds it as each benchmark
// does, since CI runs no benchmarks.
func benchHandler(tb testing.TB, opts ...app.Option) (http.Handler, *redistest.RoundTrips) {
	tb.Helper()
	tg := redistest.New(tb)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": benchKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": tb.TempDir(), "OTPGUARD_LOG_LEVEL": "warn", "OTPGUARD_SMS": "console",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		tb.Fatal(err)
	}
	// A bucket that never denies: every decision writes.
	cfg.Policies.Limits = map[string]limit.Policy{
		"api": {Algorithm: limit.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000, OnStoreError: limit.FallbackOpen},
	}
	cfg.Policies.FillDefaults()
	a, err := app.New(context.Background(), cfg, append([]app.Option{app.WithOutput(io.Discard)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	rt := &redistest.RoundTrips{}
	a.Redis().AddHook(rt)
	return a.Handler(), rt
}
