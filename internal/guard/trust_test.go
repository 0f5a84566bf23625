package guard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// trustOTP is an OTP service on a real Redis with the default policy, no
// cooldown, the new tier's floor at newFloor and the trusted tier's at
// trustFloor, on the clock now.
func trustOTP(t *testing.T, newFloor, trustFloor int64, now func() time.Time) (*guard.OTP, *redistest.RoundTrips) {
	t.Helper()
	s, rt, _ := redistest.Store(t)
	guard.WarmPhoneMetadata()
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Floor = newFloor
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.Trust.Floor = trustFloor
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: guardtest.Sender{}, Now: now,
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks})
	t.Cleanup(otp.Close)
	return otp, rt
}

// gb is the n-th of a run of valid GB mobiles (not the Channel Islands'
// or Man's, which share +44 7), spread over prefixes.
func gb(n int) string {
	for k := n; ; k += 1000 {
		s := fmt.Sprintf("+4474%02d%06d", 10+k%90, 100000+k*7919%900000)
		if p, err := guard.ParsePhone(s, ""); err == nil && p.Region == "GB" && p.Type() == "mobile" {
			return s
		}
	}
}

// TestTrustTiers: sends in order, each answered as the tiers say: the new
// tier's floor refuses new numbers, account sends count in the trusted
// tier up to its own floor, and neither tier spends the other's room.
func TestTrustTiers(t *testing.T) {
	otp, _ := trustOTP(t, 3, 4, nil)
	ctx := context.Background()
	steps := []struct {
		name    string
		n       int
		account bool
		want    problem.Code
	}{
		{"new 1", 1, false, ""}, {"new 2", 2, false, ""}, {"new 3", 3, false, ""},
		{"new 4: refused", 4, false, problem.CodeUnusualVolume},
		{"account 1", 11, true, ""}, {"account 2", 12, true, ""}, {"account 3", 13, true, ""}, {"account 4", 14, true, ""},
		{"account 5: the trusted cap", 15, true, problem.CodeUnusualVolume},
		{"new 5: still refused", 5, false, problem.CodeUnusualVolume},
	}
	for _, st := range steps {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: gb(st.n), ClientIP: fmt.Sprintf("203.0.113.%d", st.n), Account: st.account})
		if got := problem.CodeOf(err); got != st.want {
			t.Errorf("%s (%s): %q (%v), want %q", st.name, gb(st.n), got, err, st.want)
		}
	}
}

// TestTrustRoundTrips: what a send waits on, in Redis round trips (a
// MULTI or pipeline counts once), by how its trust is known. The mark is
// read in the velocity script of the limits' MULTI, so a new number costs
// what it did before trust (2); a marked one too: the automatic windows
// read the mark in the same MULTI and count nothing, so there is nothing
// to give back (2); the app's account flag knows at once (2).
func TestTrustRoundTrips(t *testing.T) {
	otp, rt := trustOTP(t, 50, 100, nil)
	ctx := context.Background()
	if _, err := otp.ImportTrusted(ctx, []string{gb(1)}, "test"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		n       int
		account bool
		want    int64
	}{
		{"new number", 2, false, 2},
		{"marked (imported) number", 1, false, 2},
		{"the app's account", 3, true, 2},
	}
	for _, tc := range cases {
		rt.Reset()
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: gb(tc.n), ClientIP: "203.0.113.9", Account: tc.account}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := rt.N(); got != tc.want {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.want)
		}
	}
}

// TestVerifiedNumberTrustedNextDay: a number that verified a code is
// trusted the next day (on a driven clock) while its country refuses new
// numbers; with verified_within 0 it is not.
func TestVerifiedNumberTrustedNextDay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		within time.Duration
		want   problem.Code
	}{
		{"trust on", guard.DefaultVerifiedWithin, ""},
		{"verified_within 0", 0, problem.CodeUnusualVolume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Now().UTC().Truncate(time.Hour).Unix())
			clock := func() time.Time { return time.Unix(now.Load(), 0) }
			s, _, _ := redistest.Store(t)
			p := guard.DefaultPolicies()
			p.OTP.Cooldown = 0
			p.OTP.CountryVelocity.Floor = 2
			p.OTP.CountryVelocity.MinuteShare = 0
			p.OTP.Trust.VerifiedWithin = tc.within
			p.FillDefaults()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			out := &guardtest.Outbox{}
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: out, Now: clock,
				HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks})
			t.Cleanup(otp.Close)
			ctx := context.Background()
			user := gb(1)
			if _, err := otp.Send(ctx, guard.SendRequest{Phone: user}); err != nil {
				t.Fatal(err)
			}
			if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: user, Code: out.Code(user)}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			now.Add(24 * 3600) // the next day
			for n := 2; n < 10; n++ {
				if _, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("203.0.113.%d", n)}); problem.CodeOf(err) == problem.CodeUnusualVolume {
					break
				} else if n == 9 {
					t.Fatal("the country never refused a new number")
				}
			}
			_, err := otp.Send(ctx, guard.SendRequest{Phone: user})
			if got := problem.CodeOf(err); got != tc.want {
				t.Errorf("the verified number's send: %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// denyAll answers every number with its entry.
type denyAll struct{ e guard.DenyEntry }

func (d denyAll) Denied(string, time.Time) (guard.DenyEntry, bool) { return d.e, true }

// TestAutoBlockSparesTrusted: a prefix the conversion watch deny-listed
// does not refuse a trusted number (the app's account, an imported
// number), and does refuse a new one; an operator's entry refuses all.
func TestAutoBlockSparesTrusted(t *testing.T) {
	cases := []struct {
		name, author string
		n            int
		account      bool
		imported     bool
		want         problem.Code
	}{
		{"watch block, new number", guard.ConversionActor, 1, false, false, problem.CodeDenied},
		{"watch block, account", guard.ConversionActor, 2, true, false, ""},
		{"watch block, imported", guard.ConversionActor, 3, false, true, ""},
		{"operator's entry, account", "ops:alice", 4, true, false, problem.CodeDenied},
		{"operator's entry, imported", "ops:alice", 5, false, true, problem.CodeDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := redistest.Store(t)
			p := guard.DefaultPolicies()
			p.FillDefaults()
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: guardtest.Sender{},
				HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks,
				Deny: denyAll{guard.DenyEntry{ID: 1, Pattern: "+44", Author: tc.author}}})
			t.Cleanup(otp.Close)
			ctx := context.Background()
			if tc.imported {
				if _, err := otp.ImportTrusted(ctx, []string{gb(tc.n)}, "test"); err != nil {
					t.Fatal(err)
				}
			}
			_, err := otp.Send(ctx, guard.SendRequest{Phone: gb(tc.n), Account: tc.account})
			if got := problem.CodeOf(err); got != tc.want {
				t.Errorf("got %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// creditCounter counts the verifies credited to the new tier's baseline.
type creditCounter struct {
	guard.Volumes
	n atomic.Int64
}

func (c *creditCounter) CountVerified(ctx context.Context, k, carrier limit.Key, hour int64, ttl time.Duration) error {
	c.n.Add(1)
	return c.Volumes.CountVerified(ctx, k, carrier, hour, ttl)
}

// TestTrustedVerifyCreditsNoBaseline: a new number's first verify credits
// the new tier's baseline; once it is trusted (its mark set by that
// verify), its next send and verify teach the new tier nothing.
func TestTrustedVerifyCreditsNoBaseline(t *testing.T) {
	s, _, _ := redistest.Store(t)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	out, credits := &guardtest.Outbox{}, &creditCounter{Volumes: s.Velocity}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: out,
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: credits, Trusts: s.TrustMarks})
	t.Cleanup(otp.Close)
	ctx := context.Background()
	user := gb(1)
	for i, want := range []struct {
		tier    guard.Tier
		credits int64
	}{{guard.TierNew, 1}, {guard.TierTrusted, 1}} {
		res, err := otp.Send(ctx, guard.SendRequest{Phone: user})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tier != want.tier {
			t.Errorf("send %d: tier %v, want %v", i+1, res.Tier, want.tier)
		}
		if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: user, Code: out.Code(user)}); err != nil {
			t.Fatalf("verify %d: %v", i+1, err)
		}
		if got := credits.n.Load(); got != want.credits {
			t.Errorf("after verify %d: %d credits to the new tier, want %d", i+1, got, want.credits)
		}
	}
}

// TestAccountVerifyCreditsTrustedTier: the verify of a code sent with the
// app's account flag to a number with no mark yet is credited where the
// send counted, the trusted tier: none to the new tier's baseline, and the
// next hour the trusted tier's cap is factor x those verifies.
func TestAccountVerifyCreditsTrustedTier(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UTC().Truncate(time.Hour).Unix())
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	s, _, _ := redistest.Store(t)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.Trust.Floor = 2
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	out, credits := &guardtest.Outbox{}, &creditCounter{Volumes: s.Velocity}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: out, Now: clock,
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: credits, Trusts: s.TrustMarks})
	t.Cleanup(otp.Close)
	ctx := context.Background()
	for n := 1; n <= 2; n++ {
		res, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("203.0.113.%d", n), Account: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tier != guard.TierTrusted {
			t.Errorf("account send %d: tier %v, want trusted", n, res.Tier)
		}
		if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: gb(n), Code: out.Code(gb(n))}); err != nil {
			t.Fatalf("verify %d: %v", n, err)
		}
	}
	if got := credits.n.Load(); got != 0 {
		t.Errorf("account sends' verifies: %d credits to the new tier, want 0", got)
	}
	now.Add(3600) // the next hour: cap max(floor 2, 3 x 2 credited)
	sent := 0
	for n := 11; n <= 20; n++ {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("203.0.113.%d", n), Account: true})
		switch problem.CodeOf(err) {
		case "":
			sent++
		case problem.CodeUnusualVolume:
		default:
			t.Fatalf("account send %d: %v", n, err)
		}
	}
	if sent != 6 {
		t.Errorf("the next hour's account sends: %d sent, want 6 (3 x 2 credited verifies)", sent)
	}
}
