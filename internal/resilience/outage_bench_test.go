package resilience_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkOutageDecision measures one decision (a /limits/check of an open
// policy, and an OTP send with on_store_error local) with the default 10 ms
// timeout against a real Redis behind a proxy: healthy, black-holed with the
// breaker kept closed (every decision waits the timeout), and black-holed
// with the breaker open (no decision touches Redis). It reports p50 and p99.
//
//	go test -run '^$' -bench BenchmarkOutageDecision -benchtime 2s ./internal/guard/
func BenchmarkOutageDecision(b *testing.B) {
	const timeout = 10 * time.Millisecond
	states := []struct {
		name    string
		holed   bool
		breaker resilience.BreakerOptions
	}{
		{name: "healthy"},
		{name: "black-holed,breaker-closed", holed: true, breaker: resilience.BreakerOptions{Failures: math.MaxInt32, MinRequests: math.MaxInt32}},
		{name: "black-holed,breaker-open", holed: true},
	}
	for _, st := range states {
		for _, what := range []string{"limits-check", "otp-send"} {
			b.Run(st.name+"/"+what, func(b *testing.B) {
				srv := redistest.Start(b)
				proxy := redistest.NewProxy(b, srv.Addr())
				rdb, err := store.NewRedisClient(store.RedisOptions{URL: proxy.URL(), Timeout: timeout})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { rdb.Close() })
				s := store.NewRedis(rdb, redistest.Prefix())
				if err := s.LoadScripts(context.Background()); err != nil {
					b.Fatal(err)
				}
				f := resilience.NewFallback(resilience.FallbackOptions{Counter: s, Codes: s, Timeout: timeout, Breaker: st.breaker,
					Instances: func() int { return 1 }})
				lim := limit.New(map[string]limit.Policy{
					"api": {Algorithm: limit.TokenBucket, Capacity: 1 << 30, RefillPerSecond: 1 << 19, OnStoreError: limit.FallbackOpen},
				}, f, nil)
				p := guard.DefaultPolicies().OTP
				p.OnStoreError, p.LocalLimit, p.Cooldown = limit.FallbackLocal, 1<<30, 0
				p.PerPhone.Limit, p.PerIP.Limit = 1<<30, 1<<30
				otp := guard.NewOTP(guard.OTPOptions{Policy: p, Counter: f, Codes: f, Sender: guardtest.Sender{},
					HMACKey: outageHMACKey, LastStoreFailure: f.LastFailure})
				ctx := context.Background()
				i := 0
				decide := func() error {
					i++
					if what == "otp-send" {
						_, err := otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+1415555%04d", i%10000), ClientIP: "203.0.113.7"})
						return err
					}
					_, err := lim.Check(ctx, []limit.Check{{Policy: "api", Key: fmt.Sprint("user:", i%1000), Cost: 1}})
					return err
				}
				for range 50 { // warm the pool (and, holed, trip the breaker)
					_ = decide()
				}
				if st.holed {
					proxy.BlackHole()
					for range 10 {
						_ = decide()
					}
				}
				if want := map[bool]string{true: "open", false: "closed"}[st.holed && st.breaker.Failures == 0]; f.Status().Breaker != want {
					b.Fatalf("breaker %s, want %s", f.Status().Breaker, want)
				}

				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					if err := decide(); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				b.StopTimer()
				slices.Sort(lat)
				q := func(p float64) float64 {
					return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
				}
				b.ReportMetric(q(0.50), "p50-µs")
				b.ReportMetric(q(0.99), "p99-µs")
			})
		}
	}
}
