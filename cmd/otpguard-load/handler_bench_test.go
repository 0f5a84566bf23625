package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkHandlerCheck is otpguard's own cost of one POST /limits/check,
// without the network to the caller: the echo handler (auth, body, JSON,
// headers, metrics) with a real Redis behind it, wired as cmd/otpguard
// wires it. Compare with the load command's latency to see what HTTP and
// the load generator add.
//
//	go test -run '^$' -bench HandlerCheck -benchtime 3s ./cmd/otpguard-load/
func BenchmarkHandlerCheck(b *testing.B) {
	for _, batch := range []int{1, 2, 10} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			h, rt := benchHandler(b)
			c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: batch}
			hdr := http.Header{"Authorization": {"Bearer " + benchKey}, "Content-Type": {"application/json"}}
			i := uint64(0)
			for b.Loop() {
				if i == 0 {
					rt.Reset()
				}
				req := httptest.NewRequest(http.MethodPost, "/limits/check", strings.NewReader(string(c.body(i))))
				req.Header = hdr.Clone()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("request %d: %d %s", i, w.Code, w.Body)
				}
				i++
			}
			b.ReportMetric(float64(rt.N())/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkHandlerCheckParallel is BenchmarkHandlerCheck from many
// goroutines: the handler's throughput on this machine's cores, Redis
// sharing them.
func BenchmarkHandlerCheckParallel(b *testing.B) {
	h, rt := benchHandler(b)
	c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: 1}
	hdr := http.Header{"Authorization": {"Bearer " + benchKey}, "Content-Type": {"application/json"}}
	var next atomic.Uint64
	b.SetParallelism(8)
	b.ResetTimer()
	rt.Reset()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/limits/check", strings.NewReader(string(c.body(next.Add(1)))))
			req.Header = hdr.Clone()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("%d %s", w.Code, w.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(rt.N())/float64(b.N), "roundtrips/op")
}

const benchKey = "bench-key-0123456789abcdef"

func benchHandler(b *testing.B) (http.Handler, *redistest.RoundTrips) {
	b.Helper()
	st, rt, rdb := redistest.Store(b)
	metrics := httpapi.NewMetrics()
	rdb.AddHook(store.TimingHook(metrics.ObserveRedis))
	// A bucket that never denies: every decision writes.
	limits := map[string]guard.LimitPolicy{
		"api": {Algorithm: guard.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000, OnStoreError: guard.FailOpen},
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := httpapi.New(httpapi.Options{
		Limiter: guard.NewLimiter(limits, st, log), APIKeys: []string{benchKey},
		Logger: log, Metrics: metrics, Spec: api.OpenAPI,
	})
	return h, rt
}
