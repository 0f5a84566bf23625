package guard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// BenchmarkOTPSendDefault is one /otp/send with the default policy and all
// its rules on a real Redis: cooldown, per number, per IP, the three
// prefix depths, the country velocity rule, the code's save, and the
// conversion watch (the default's abuse defences). The limits are raised
// so that nothing is denied; every iteration sends to a new number.
//
// roundtrips/op counts the decision client: what the send waits for. The
// conversion watch reaches Redis through a client of its own, counted in
// watch-roundtrips/op.
func BenchmarkOTPSendDefault(b *testing.B) {
	s, rt, _ := redistest.Store(b)
	watch, wrt, _ := redistest.Store(b) // another client on another prefix: the watch's own tallies
	guard.WarmPhoneMetadata()
	p := guard.DefaultPolicies()
	p.FillDefaults()
	huge := int64(1_000_000_000)
	p.OTP.PerPhone.Limit, p.OTP.PerIP.Limit, p.OTP.PerPrefix.Limit = huge, huge, huge
	for i := range p.OTP.PrefixDepths {
		p.OTP.PrefixDepths[i].Limit = huge
	}
	p.OTP.CountryVelocity.Floor = huge
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s, Codes: s, Sender: guardtest.Sender{},
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s, Conversions: watch})
	b.Cleanup(func() { closeOTP(otp) })
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if i == 0 {
			rt.Reset()
			wrt.Reset()
		}
		req := guard.SendRequest{Phone: fmt.Sprintf("+9198%08d", i), ClientIP: "203.0.113.7"}
		if _, err := otp.Send(ctx, req); err != nil {
			b.Fatalf("send %d (%s): %v", i, req.Phone, err)
		}
		i++
	}
	b.StopTimer()
	flushOTP(otp)
	b.ReportMetric(float64(wrt.N())/float64(b.N), "watch-roundtrips/op")
	rt.Report(b, wantDefaultSendRoundTrips)
}

// wantDefaultSendRoundTrips: the limits and the velocity count in one
// MULTI, the code's save in another.
const wantDefaultSendRoundTrips = 2

func closeOTP(o *guard.OTP) { o.Close() }
func flushOTP(o *guard.OTP) {
	if err := o.Flush(context.Background()); err != nil {
		panic(err)
	}
}

// TestDefaultSendRoundTrips: a default send waits on two round trips (its
// limits and the velocity rule in one MULTI, then the code's save), and
// the conversion watch counts it afterwards in one more, on its own. A
// send the cooldown refuses waits on two: the take, and the refunds of
// everything else it counted (sent together).
func TestDefaultSendRoundTrips(t *testing.T) {
	s, rt, _ := redistest.Store(t)
	watch, wrt, _ := redistest.Store(t)
	guard.WarmPhoneMetadata()
	p := guard.DefaultPolicies()
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s, Codes: s, Sender: guardtest.Sender{},
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s, Conversions: watch})
	t.Cleanup(otp.Close)
	ctx := context.Background()
	req := guard.SendRequest{Phone: "+919812345678", ClientIP: "203.0.113.7"}
	rt.Reset()
	if _, err := otp.Send(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := rt.N(); got != 2 {
		t.Errorf("send: %d round trips, want 2", got)
	}
	if err := otp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := wrt.N(); got != 1 {
		t.Errorf("conversion watch: %d round trips, want 1 (four subjects, one pipeline)", got)
	}
	rt.Reset()
	_, err := otp.Send(ctx, req)
	if problem.CodeOf(err) != problem.CodeCooldown {
		t.Fatalf("second send: %v, want cooldown", err)
	}
	// The take, the counters' refund and the velocity refund (the two
	// refunds concurrently): three round trips, two of latency.
	if got := rt.N(); got != 3 {
		t.Errorf("refused send: %d round trips, want 3", got)
	}
}
