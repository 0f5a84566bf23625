package guard_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestPacePolicyDefaults: the policy's defaults carry the pace and the
// hold; a file that leaves growth_per_day at 0 gets the default, one that
// sets hold_for 0 holds nothing; growth under 1 and a hold past 30 days or
// below 0 are refused.
func TestPacePolicyDefaults(t *testing.T) {
	p := guard.DefaultPolicies()
	p.FillDefaults()
	if got := p.OTP.CountryVelocity.GrowthPerDay; got != 2 {
		t.Errorf("default growth_per_day %v, want 2", got)
	}
	if got := p.OTP.Trust.HoldFor; got != 72*time.Hour {
		t.Errorf("default hold_for %v, want 72h", got)
	}
	p.OTP.CountryVelocity.GrowthPerDay = 0
	p.FillDefaults()
	if got := p.OTP.CountryVelocity.GrowthPerDay; got != 2 {
		t.Errorf("growth_per_day 0 filled as %v, want the default 2", got)
	}
	cases := []struct {
		name   string
		growth float64
		hold   time.Duration
		field  string // "": valid
	}{
		{"defaults", 2, 72 * time.Hour, ""},
		{"growth 1: never grow", 1, 72 * time.Hour, ""},
		{"growth 0: the default (left to FillDefaults)", 0, 72 * time.Hour, ""},
		{"hold 0: never held", 2, 0, ""},
		{"growth under 1", 0.5, 72 * time.Hour, "otp.country_velocity.growth_per_day"},
		{"growth negative", -2, 72 * time.Hour, "otp.country_velocity.growth_per_day"},
		{"hold negative", 2, -time.Hour, "otp.trust.hold_for"},
		{"hold past 30 days", 2, 31 * 24 * time.Hour, "otp.trust.hold_for"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			p.FillDefaults()
			p.OTP.CountryVelocity.GrowthPerDay = tc.growth
			p.OTP.Trust.HoldFor = tc.hold
			err := p.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
				t.Errorf("got %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

// TestHeldMarkWaitsItsTime, on a real Redis and a driven clock: numbers
// verified in a normal hour are trusted at once; numbers verified in an
// hour whose new numbers ran above max(floor, growth x baseline) verify as
// any other but their marks are held: counted in the metric each, audited
// once for the country and hour, their next sends new numbers' until the
// hold ends, then trusted. A verify waits on as many round trips in an
// abnormal hour as in a normal one (the mark's script judges the hour),
// but for the first held verify of the hour on each instance (its audit
// claim).
func TestHeldMarkWaitsItsTime(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UTC().Truncate(24*time.Hour).Unix() + 9*3600) // 09:00 of today
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	s, rt, _ := redistest.Store(t)
	watch, _, _ := redistest.Store(t) // the watch's counts, off the counted client
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Floor = 2
	p.OTP.CountryVelocity.MinuteShare = 0
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var held atomic.Int64
	out, events := &guardtest.Outbox{}, &guardtest.Events{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: s.Counters, Codes: s.Codes, Sender: out, Now: clock,
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks,
		Conversions: claimsOn{Conversions: watch.Conversions, claims: s.Conversions}, Events: events,
		Abuse: guard.AbuseHooks{TrustMarkHeld: func(country, _ string) {
			if country == "GB" {
				held.Add(1)
			}
		}}})
	t.Cleanup(otp.Close)
	ctx := context.Background()
	send := func(n int) guard.Tier {
		t.Helper()
		res, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("203.0.113.%d", n)})
		if err != nil {
			t.Fatalf("send to %d: %v", n, err)
		}
		return res.Tier
	}
	verify := func(n int) int64 {
		t.Helper()
		rt.Reset()
		if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: gb(n), Code: out.Code(gb(n))}); err != nil {
			t.Fatalf("verify %d: %v", n, err)
		}
		return rt.N()
	}
	// Hour 0: 2 new numbers, within the floor: trusted at once.
	send(1)
	send(2)
	normalRT := verify(1)
	verify(2)
	// Hour 1: baseline 2 (its limit 6); 5 new numbers run above 2 x 2.
	now.Add(3600)
	for n := 3; n <= 7; n++ {
		send(n)
	}
	firstHeldRT := verify(3)
	heldRT := verify(4)
	for n := 5; n <= 7; n++ {
		verify(n)
	}
	if got := held.Load(); got != 5 {
		t.Errorf("%d marks held, want 5", got)
	}
	if ev := events.Action(guard.ActionTrustHeld); len(ev) != 1 || ev[0].Country != "GB" {
		t.Errorf("audit: %+v, want one otp.trust.held event for GB", ev)
	}
	if heldRT != normalRT || firstHeldRT != normalRT+1 {
		t.Errorf("a verify's round trips: %d in a normal hour, %d held, %d for the hour's first held; want equal, and one more for the first",
			normalRT, heldRT, firstHeldRT)
	}
	t.Logf("a verify waits on %d round trips (%d for the first held of an hour on an instance)", normalRT, firstHeldRT)
	// The next day: the normal hour's numbers are trusted, the held not yet.
	now.Add(24 * 3600)
	if got := send(1); got != guard.TierTrusted {
		t.Errorf("a number verified in a normal hour: tier %v, want trusted", got)
	}
	if got := send(3); got != guard.TierNew {
		t.Errorf("a held number the next day: tier %v, want new", got)
	}
	// Once the hold is over, trusted.
	now.Add(int64(guard.DefaultHoldFor / time.Second))
	if got := send(4); got != guard.TierTrusted {
		t.Errorf("a held number after the hold: tier %v, want trusted", got)
	}
}

// claimsOn is a guard.Conversions whose alert claims go to claims: the
// conversion watch counts in the background, on a client whose round trips
// a test does not count, while a verify's audit claim is one of its own.
type claimsOn struct {
	guard.Conversions
	claims guard.Conversions
}

func (c claimsOn) ClaimAlert(ctx context.Context, subject limit.Key, ttl time.Duration) (bool, error) {
	return c.claims.ClaimAlert(ctx, subject, ttl)
}
