package guard_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The cost of one decision of the domain on a real Redis: parsing and
// validation, the store's round trips, and (for a send) the code's HMAC.
// Run with
//
//	go test -run '^$' -bench . -benchtime 3s ./internal/guard/
//
// roundtrips/op counts what the client sent to Redis per decision (a
// MULTI/EXEC is one), with a go-redis hook; connection set-up is not counted.

// BenchmarkOTPSend is one /otp/send decision through guard.OTP.Send: parse
// the number, one round trip for every limit (one MULTI, each limit its own
// INCRBY + PEXPIRE NX), a new code and its HMAC, one round trip to save
// it; the sender does nothing. Limits are huge and every iteration
// sends to a new number, so nothing is ever denied.
func BenchmarkOTPSend(b *testing.B) {
	for _, c := range []struct {
		name     string
		cooldown time.Duration
		ip       string
		prefix   bool    // the per-prefix limit (on by default)
		want     float64 // round trips: one for the limits, one to save the code
	}{
		{"per_phone", 0, "", false, 2},
		{"per_phone+per_ip", 0, "203.0.113.7", false, 2},
		{"cooldown+per_phone+per_ip", 30 * time.Second, "203.0.113.7", false, 2},
		{"cooldown+per_phone+per_ip+per_prefix", 30 * time.Second, "203.0.113.7", true, 2},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, rt, _ := redistest.Store(b)
			guard.WarmPhoneMetadata()
			p := guard.DefaultPolicies()
			p.FillDefaults()
			p.OTP.Cooldown = c.cooldown
			p.OTP.PerPhone = guard.Window{Limit: 1_000_000_000, Window: 10 * time.Minute}
			p.OTP.PerIP = guard.Window{Limit: 1_000_000_000, Window: time.Hour}
			p.OTP.PerPrefix.Limit = 0
			if c.prefix {
				p.OTP.PerPrefix.Limit = 1_000_000_000
			}
			if err := p.Validate(); err != nil {
				b.Fatal(err)
			}
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s, Codes: s, Sender: guardtest.Sender{},
				HMACKey: []byte("0123456789abcdef0123456789abcdef")})
			ctx := context.Background()
			i := 0
			for b.Loop() {
				if i == 0 {
					rt.Reset()
				}
				req := guard.SendRequest{Phone: fmt.Sprintf("+9198%08d", i), ClientIP: c.ip}
				if _, err := otp.Send(ctx, req); err != nil {
					b.Fatalf("send %d (%s): %v", i, req.Phone, err)
				}
				i++
			}
			rt.Report(b, c.want)
		})
	}
}

// BenchmarkLimiterCheck is one /limits/check decision through
// limit.Limiter.Check (policy lookup, key and cost validation, the store's
// one round trip), for one check and for a batch of 10.
func BenchmarkLimiterCheck(b *testing.B) {
	for _, batch := range []int{1, 10} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			s, rt, _ := redistest.Store(b)
			guard.WarmPhoneMetadata()
			policies := map[string]limit.Policy{
				"api": {Algorithm: limit.TokenBucket, Capacity: 1_000_000_000, RefillPerSecond: 1_000_000, OnStoreError: limit.FallbackOpen},
			}
			l := limit.New(policies, s, nil)
			ctx := context.Background()
			checks := make([]limit.Check, batch)
			i := 0
			for b.Loop() {
				if i == 0 {
					rt.Reset()
				}
				for j := range checks {
					checks[j] = limit.Check{Policy: "api", Key: "user:" + strconv.Itoa((i*batch+j)%1000), Cost: 1}
				}
				res, err := l.Check(ctx, checks)
				if err != nil {
					b.Fatal(err)
				}
				if !res.Allowed {
					b.Fatalf("check %d denied: %+v", i, res)
				}
				i++
			}
			rt.Report(b, 1)
		})
	}
}
