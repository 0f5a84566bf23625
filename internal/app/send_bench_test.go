package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkHandlerSend is one POST /otp/send through the whole service as
// the binary builds it (app.New: auth, strict JSON, the Fallback, every
// default rule, the conversion watch, the audit queue to SQLite), on a
// real Redis, with a sender that does nothing. The limits are raised so
// that nothing is denied; every request sends to a new number.
//
//	go test -run '^$' -bench HandlerSend -benchtime 2000x ./internal/app/
//
// cpu-us/op is this process's CPU (user + system, getrusage) per send:
// otpguard's own cost, the in-process caller included (small: a recorder,
// no network). redis-roundtrips/op counts everything the instance sent to
// Redis per send, the conversion watch's batches included.
func BenchmarkHandlerSend(b *testing.B) { benchHandlerSend(b, false) }

// BenchmarkHandlerSendIdempotent is BenchmarkHandlerSend with an
// Idempotency-Key on every send (a new one each): its claim, and the
// answer stored after it left.
func BenchmarkHandlerSendIdempotent(b *testing.B) { benchHandlerSend(b, true) }

func benchHandlerSend(b *testing.B, keyed bool) {
	h, a, rt := sendBenchApp(b)
	hdr := http.Header{"Authorization": {"Bearer " + sendBenchKey}, "Content-Type": {"application/json"}}
	var cpu0 time.Duration
	i := 0
	for b.Loop() {
		if i == 0 {
			rt.Reset()
			cpu0 = processCPU(b)
		}
		body := fmt.Sprintf(`{"phone":"+9198%08d","client_ip":"203.0.113.7"}`, i)
		req := httptest.NewRequest(http.MethodPost, "/otp/send", strings.NewReader(body))
		req.Header = hdr.Clone()
		if keyed {
			req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d", i))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("send %d: %d %s", i, w.Code, w.Body)
		}
		i++
	}
	b.StopTimer()
	flushWatch(b, a)
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(rt.N())/float64(b.N), "redis-roundtrips/op")
}

// BenchmarkHandlerSendParallel is BenchmarkHandlerSend from 16 goroutines
// (on 2 cores): concurrent sends, as under load; the conversion watch
// then batches many sends per round trip.
func BenchmarkHandlerSendParallel(b *testing.B) {
	h, a, rt := sendBenchApp(b)
	hdr := http.Header{"Authorization": {"Bearer " + sendBenchKey}, "Content-Type": {"application/json"}}
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	rt.Reset()
	cpu0 := processCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"phone":"+9197%08d","client_ip":"203.0.113.7"}`, next.Add(1))
			req := httptest.NewRequest(http.MethodPost, "/otp/send", strings.NewReader(body))
			req.Header = hdr.Clone()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("%d %s", w.Code, w.Body)
				return
			}
		}
	})
	b.StopTimer()
	flushWatch(b, a)
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(rt.N())/float64(b.N), "redis-roundtrips/op")
}

// sendBenchApp is the service the send benchmarks measure. CI runs no
// benchmarks, so TestSendBenchSetup builds it once.
func sendBenchApp(tb testing.TB) (http.Handler, *app.App, *redistest.RoundTrips) {
	tb.Helper()
	tg := redistest.New(tb)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": sendBenchKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": tb.TempDir(), "OTPGUARD_LOG_LEVEL": "warn",
		// A generous timeout: on a loaded host a 10 ms one turns queueing into
		// 503s, and this measures the work of a send, not the fallback.
		"OTPGUARD_REDIS_TIMEOUT": "1s",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		tb.Fatal(err)
	}
	huge := int64(1_000_000_000)
	p := &cfg.Policies.OTP
	p.PerPhone.Limit, p.PerIP.Limit, p.PerPrefix.Limit = huge, huge, huge
	for i := range p.PrefixDepths {
		p.PrefixDepths[i].Limit = huge
	}
	// The unverified budget stays on (its check runs in the velocity
	// script), at a floor no run reaches: nobody verifies these codes.
	p.CountryVelocity.Floor, p.CountryVelocity.UnverifiedFloor = huge, huge
	cfg.Policies.FillDefaults()
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard), app.WithSender(guardtest.Sender{}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	rt := &redistest.RoundTrips{}
	a.Redis().AddHook(rt)
	return a.Handler(), a, rt
}

// TestSendBenchSetup builds the send benchmarks' service and sends one code
// through it, so that a config rule its setup misses fails here rather than
// the next time someone runs the benchmark.
func TestSendBenchSetup(t *testing.T) {
	h, _, _ := sendBenchApp(t)
	req := httptest.NewRequest(http.MethodPost, "/otp/send", strings.NewReader(`{"phone":"+919800000000","client_ip":"203.0.113.7"}`))
	req.Header.Set("Authorization", "Bearer "+sendBenchKey)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("got %d %s, want 200", w.Code, w.Body)
	}
}

const sendBenchKey = "bench-key-0123456789abcdef"

// processCPU is the user and system CPU this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
