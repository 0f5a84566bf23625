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
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The cold room where the store does not answer in one MULTI: Redis
// Cluster's order (the velocity count after the limits), Redis down, and
// the room's settings.
// slotOrder is a SendCounter that takes a send as the store does on
// Redis Cluster: the limits first and, only when every one allowed, the
// velocity count, on its own; alone counts the calls that take the
// velocity count alone.
type slotOrder struct {
	limit.Counter
	volumes guard.Volumes
	alone   atomic.Int64
}

func (c *slotOrder) TakeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	if len(takes) == 0 {
		c.alone.Add(1)
	}
	res, err := c.Take(ctx, takes)
	if err != nil || vol == nil {
		return res, nil, err
	}
	for _, r := range res {
		if !r.Allowed {
			return res, &guard.VolumeResult{}, nil // not counted
		}
	}
	v, err := c.volumes.TakeVolume(ctx, *vol)
	if err != nil {
		return nil, nil, err
	}
	return res, &v, nil
}

// TestColdRoomAsksAlone: where a refusal by the room stops the send
// before its velocity count (Redis Cluster's order), the first send of a
// warm country an instance has no reading for, with the room spent, asks
// for the country's reply alone (once) and goes; a cold country's stays
// refused.
func TestColdRoomAsksAlone(t *testing.T) {
	tg := redistest.New(t)
	s, _, _ := redistest.StoreAt(t, tg)
	var now atomic.Int64
	now.Store(time.Now().Truncate(time.Hour).Add(20 * time.Minute).Unix())
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.CountryVelocity.ColdPerHour = 2
	p.FillDefaults()
	box := &guardtest.Outbox{}
	build := func(c limit.Counter, p guard.OTPPolicy) *guard.OTP {
		otp := guard.NewOTP(guard.OTPOptions{Policy: p, Counter: c, Codes: s.Codes, Sender: box, Now: clock,
			HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks})
		t.Cleanup(otp.Close)
		return otp
	}
	ctx := context.Background()
	off := p.OTP
	off.CountryVelocity.ColdPerHour = 0
	history := build(s.Counters, off)
	warmHistory(t, history, box, &now, "GB", guard.DefaultColdBelow, guard.DefaultColdBelow) // GB's history
	sc := &slotOrder{Counter: s.Counters, volumes: s.Velocity}
	otp := build(sc, p.OTP)
	for n := range 2 {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: mobileOf(t, "DE", n), ClientIP: fmt.Sprintf("198.51.100.%d", n+1)}); err != nil {
			t.Fatalf("cold send %d: %v", n+1, err)
		}
	}
	for n, want := range []int64{1, 1} {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("198.51.101.%d", n+1)}); err != nil {
			t.Fatalf("warm send %d with the room spent: %v", n+1, err)
		}
		if got := sc.alone.Load(); got != want {
			t.Errorf("after warm send %d: %d replies asked alone, want %d (only the first, with no reading)", n+1, got, want)
		}
	}
	_, err := otp.Send(ctx, guard.SendRequest{Phone: mobileOf(t, "FR", 1), ClientIP: "198.51.102.1"})
	wantCode(t, err, problem.CodeUnusualVolume)
	if got := sc.alone.Load(); got != 2 {
		t.Errorf("after a cold send refused by the room: %d replies asked alone, want 2 (it has no reading either)", got)
	}
}

// TestColdRoomPolicyValidation: the room's settings name themselves when
// wrong; 0 turns it off.
func TestColdRoomPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*guard.CountryVelocity)
		want string
	}{
		{"negative per hour", func(v *guard.CountryVelocity) { v.ColdPerHour = -1 }, "otp.country_velocity.cold_per_hour"},
		{"day below the hour", func(v *guard.CountryVelocity) { v.ColdPerDay = 20 }, "otp.country_velocity.cold_per_day"},
		{"below 0", func(v *guard.CountryVelocity) { v.ColdBelow = 0 }, "otp.country_velocity.cold_below"},
	} {
		p := guard.DefaultPolicies()
		tc.edit(&p.OTP.CountryVelocity)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	p := guard.DefaultPolicies()
	p.OTP.CountryVelocity.ColdPerHour, p.OTP.CountryVelocity.ColdBelow = 0, 0
	if err := p.Validate(); err != nil {
		t.Errorf("room off: %v, want valid", err)
	}
}

// TestColdRoomSplitWhenStoreDown: with Redis down and on_store_error
// open, the room is decided from this instance's memory like the other
// shared windows: its split limit (cold_per_hour / N), every country cold
// (no reply to read).
func TestColdRoomSplitWhenStoreDown(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 0, 0, time.UTC)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.OnStoreError = limit.FallbackOpen
	p.OTP.CountryVelocity.ColdPerHour = 12
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	st := guardtest.NewOutageStore()
	st.SetDown(true)
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Now: func() time.Time { return now },
		Instances: func() int { return 3 }})
	box := &guardtest.Outbox{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: f, Codes: f, Sender: box, HMACKey: outageHMACKey,
		Now: func() time.Time { return now }, LastStoreFailure: f.LastFailure, Volumes: &fakeVolumes{}})
	t.Cleanup(otp.Close)
	countries := []string{"DE", "FR", "NG"}
	for n := range 6 {
		_, err := otp.Send(context.Background(), guard.SendRequest{Phone: mobileOf(t, countries[n%3], n), ClientIP: fmt.Sprintf("203.0.113.%d", n+1)})
		want := problem.Code("")
		if n >= 4 { // 12 / 3 instances
			want = problem.CodeUnusualVolume
		}
		if got := problem.CodeOf(err); got != want {
			t.Errorf("send %d with the store down: %q (%v), want %q", n+1, got, err, want)
		}
	}
}

// TestColdRoomOnRedisCluster: on Redis Cluster a refusal by the room stops
// the send before its velocity count; the first send of a warm country
// an instance has no reading for, with the room spent, asks for the reply
// alone and goes, nothing of it kept in the room; a cold country's send
// is refused.
func TestColdRoomOnRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	prefix := redistest.Prefix()
	var now atomic.Int64
	now.Store(time.Now().Truncate(time.Hour).Add(20 * time.Minute).Unix())
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.CountryVelocity.ColdPerHour = 2
	p.FillDefaults()
	box := &guardtest.Outbox{}
	build := func(p guard.OTPPolicy) (*guard.OTP, *redistest.RoundTrips) {
		s, rt := redistest.ClusterStoreAt(t, c, prefix)
		otp := guard.NewOTP(guard.OTPOptions{Policy: p, Counter: s.Counters, Codes: s.Codes, Sender: box, Now: clock,
			HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks})
		t.Cleanup(otp.Close)
		return otp, rt
	}
	ctx := context.Background()
	off := p.OTP
	off.CountryVelocity.ColdPerHour = 0
	history, _ := build(off)
	warmHistory(t, history, box, &now, "GB", guard.DefaultColdBelow, guard.DefaultColdBelow) // GB's history
	filler, _ := build(p.OTP)
	for n := range 2 {
		if _, err := filler.Send(ctx, guard.SendRequest{Phone: mobileOf(t, "DE", n), ClientIP: fmt.Sprintf("198.51.100.%d", n+1)}); err != nil {
			t.Fatalf("cold send %d: %v", n+1, err)
		}
	}
	otp, _ := build(p.OTP)
	for n := range 2 {
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: gb(n), ClientIP: fmt.Sprintf("198.51.101.%d", n+1)}); err != nil {
			t.Fatalf("warm send %d with the room spent: %v", n+1, err)
		}
	}
	_, err := otp.Send(ctx, guard.SendRequest{Phone: mobileOf(t, "FR", 1), ClientIP: "198.51.102.1"})
	wantCode(t, err, problem.CodeUnusualVolume)
	_, err = filler.Send(ctx, guard.SendRequest{Phone: mobileOf(t, "DE", 5), ClientIP: "198.51.102.2"})
	wantCode(t, err, problem.CodeUnusualVolume)
}
