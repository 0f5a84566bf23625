package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// BenchmarkDeniedKeyMemoryOTPGuard hammers one key at (at most) 1,000
// requests a second for 2 real seconds against a real otpguard (real
// Redis) whose fixed window allows 10 a second, and reports how many
// requests reached otpguard and how many were allowed, with and without
// the client's denied-key memory. Paced by the wall clock, so it reports
// and never asserts: the simulated test (memory_sim_test.go) is the one
// that checks.
func BenchmarkDeniedKeyMemoryOTPGuard(b *testing.B) {
	for _, mem := range []bool{false, true} {
		name, size := "memory=off", 0
		if mem {
			name, size = "memory=on", client.DefaultDenialMemory
		}
		b.Run(name, func(b *testing.B) {
			g := otpguardtest.Start(b, map[string]limit.Policy{
				"hammer": {Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second, OnStoreError: limit.FallbackOpen},
			})
			c, err := client.New(g.URL, client.WithAPIKey(otpguardtest.APIKey), client.WithDenialMemory(size))
			if err != nil {
				b.Fatal(err)
			}
			const requests, every = 2000, time.Millisecond
			var allowed, late int
			for b.Loop() {
				allowed, late = 0, 0
				before := g.Hits("/limits/check")
				start := time.Now()
				for i := range requests {
					if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
						time.Sleep(wait)
					} else if wait < -every {
						late++
					}
					res, err := c.Check(context.Background(), client.Check{Policy: "hammer", Key: "user:1"})
					if err != nil {
						b.Fatal(err)
					}
					if res.Allowed {
						allowed++
					}
				}
				b.ReportMetric(float64(g.Hits("/limits/check")-before), "otpguard-hits/2k-req")
				b.ReportMetric(float64(allowed), "allowed/2k-req")
				b.ReportMetric(float64(late), "late/2k-req")
			}
		})
	}
}
