package guard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
)

// fakeVolumes is a hand-written guard.Volumes: each method calls its
// function field when set and records what it was asked.
type fakeVolumes struct {
	mu       sync.Mutex
	take     func(guard.VolumeTake) (guard.VolumeResult, error)
	takes    []guard.VolumeTake
	refunds  []int64
	verified []int64
	// refundCarriers and verifiedCarriers: the carrier keys refunds and
	// credits came with (carriershare.go).
	refundCarriers   []limit.Key
	verifiedCarriers []limit.Key
	// refundDeadlines: how many refunds came with a deadline of guard's
	// own (the store's client bounds a call that has none).
	refundDeadlines int
}

func (f *fakeVolumes) TakeVolume(_ context.Context, t guard.VolumeTake) (guard.VolumeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takes = append(f.takes, t)
	if f.take == nil {
		return guard.VolumeResult{Allowed: true}, nil
	}
	return f.take(t)
}

func (f *fakeVolumes) RefundVolume(ctx context.Context, _, carrier limit.Key, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refunds = append(f.refunds, at.Unix()/3600)
	f.refundCarriers = append(f.refundCarriers, carrier)
	if _, ok := ctx.Deadline(); ok {
		f.refundDeadlines++
	}
	return nil
}

func (f *fakeVolumes) CountVerified(_ context.Context, _, carrier limit.Key, hour int64, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verified = append(f.verified, hour)
	f.verifiedCarriers = append(f.verifiedCarriers, carrier)
	return nil
}

func (f *fakeVolumes) Quarantine(context.Context, limit.Key, time.Time, time.Duration) error {
	return nil
}

// failingSender refuses every message as the provider would a bad number.
var failingSender = guardtest.Sender{SendFn: func(context.Context, guard.Message) error {
	return &problem.Error{Code: problem.CodeProviderUnavailable, Message: "refused", Err: guard.ErrNotSent}
}}

// TestCountryVelocityRule: what Send and Verify ask of the velocity store,
// and what a refusal or a failure of it does to the send.
func TestCountryVelocityRule(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 0, 0, time.UTC)
	hour := now.Unix() / 3600
	policy := func(edit func(*guard.OTPPolicy)) guard.OTPPolicy {
		p := guard.DefaultPolicies()
		p.OTP.Cooldown = 0
		p.OTP.CountryVelocity.Expected = map[string]int64{"NG": 400}
		if edit != nil {
			edit(&p.OTP)
		}
		p.FillDefaults()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		return p.OTP
	}
	build := func(p guard.OTPPolicy, vol *fakeVolumes, sender guard.Sender) (*guard.OTP, *guardtest.OutageStore) {
		st := guardtest.NewOutageStore()
		return guard.NewOTP(guard.OTPOptions{Policy: p, Counter: st, Codes: st, Sender: sender, HMACKey: outageHMACKey,
			Now: func() time.Time { return now }, Volumes: vol}), st
	}
	ctx := context.Background()

	t.Run("asks with the hour, the floor and the declared volume", func(t *testing.T) {
		vol := &fakeVolumes{}
		otp, _ := build(policy(nil), vol, &guardtest.Outbox{})
		for _, phone := range []string{"+2348031234567", "+447400123456"} {
			if _, err := otp.Send(ctx, guard.SendRequest{Phone: phone}); err != nil {
				t.Fatal(err)
			}
		}
		if len(vol.takes) != 2 {
			t.Fatalf("takes: %d, want 2", len(vol.takes))
		}
		ng, gb := vol.takes[0], vol.takes[1]
		if ng.Key.ID != "NG" || ng.Hour != hour || ng.Floor != 400 || ng.QFloor != 40 || ng.Factor != 3 || ng.Lookback != 168 || ng.MinuteShare != 0.1 {
			t.Errorf("NG take: %+v, want hour %d, floor 400 (expected), quarantine floor 40, factor 3, lookback 168, minute share 0.1", ng, hour)
		}
		if gb.Key.ID != "GB" || gb.Floor != 50 || gb.QFloor != 5 {
			t.Errorf("GB take: %+v, want floor 50, quarantine floor 5", gb)
		}
	})

	t.Run("refusal: unusual_volume until the hour ends, no SMS, counters refunded", func(t *testing.T) {
		vol := &fakeVolumes{take: func(guard.VolumeTake) (guard.VolumeResult, error) {
			return guard.VolumeResult{Count: 50, Limit: 50}, nil
		}}
		box := &guardtest.Outbox{}
		otp, st := build(policy(nil), vol, box)
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567", ClientIP: "192.0.2.1"})
		wantCode(t, err, problem.CodeUnusualVolume)
		var e *problem.Error
		if !errors.As(err, &e) || e.RetryAfter != 40*time.Minute {
			t.Errorf("RetryAfter: %v, want 40m (to the end of the hour)", e.RetryAfter)
		}
		if box.Count() != 0 {
			t.Errorf("SMS sent: %d, want 0", box.Count())
		}
		for k, v := range st.Counts() {
			if v != 0 {
				t.Errorf("counter %v: %d after the refusal, want refunded to 0", k, v)
			}
		}
	})

	t.Run("the minute's cap: unusual_volume until the minute ends", func(t *testing.T) {
		vol := &fakeVolumes{take: func(guard.VolumeTake) (guard.VolumeResult, error) {
			return guard.VolumeResult{Count: 60, Limit: 480, MinuteLimit: 50}, nil
		}}
		otp, _ := build(policy(nil), vol, &guardtest.Outbox{})
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"})
		wantCode(t, err, problem.CodeUnusualVolume)
		var e *problem.Error
		if !errors.As(err, &e) || e.RetryAfter != time.Minute {
			t.Errorf("RetryAfter: %v, want 1m (to the end of the minute)", e.RetryAfter)
		}
	})

	t.Run("a send that surely did not leave gives its hour back", func(t *testing.T) {
		vol := &fakeVolumes{}
		otp, _ := build(policy(nil), vol, failingSender)
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"})
		wantCode(t, err, problem.CodeProviderUnavailable)
		if len(vol.refunds) != 1 || vol.refunds[0] != hour {
			t.Errorf("refunds: %v, want [%d]", vol.refunds, hour)
		}
		// A refund is part of the count: the store's Redis budget bounds
		// it, as it does the limits' refunds, not the watch's second
		// (a refund dropped at that second under load over-counted the
		// country's hour in TestSendLimitsTogetherExactAcrossInstances).
		if vol.refundDeadlines != 0 {
			t.Errorf("%d refunds came with a deadline of guard's own, want 0: the store's budget bounds them", vol.refundDeadlines)
		}
	})

	t.Run("store failure: closed refuses, open sends", func(t *testing.T) {
		down := func(guard.VolumeTake) (guard.VolumeResult, error) {
			return guard.VolumeResult{}, errors.New("connection refused")
		}
		otp, _ := build(policy(nil), &fakeVolumes{take: down}, &guardtest.Outbox{})
		_, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"})
		wantCode(t, err, problem.CodeStoreUnavailable)
		box := &guardtest.Outbox{}
		otp, _ = build(policy(func(p *guard.OTPPolicy) { p.OnStoreError = limit.FallbackOpen }), &fakeVolumes{take: down}, box)
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil || box.Count() != 1 {
			t.Errorf("open: %v, %d SMS; want sent", err, box.Count())
		}
	})

	t.Run("not asked when the fallback decided the send", func(t *testing.T) {
		st := guardtest.NewOutageStore()
		st.SetDown(true)
		f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: st, Now: func() time.Time { return now }})
		vol := &fakeVolumes{}
		box := &guardtest.Outbox{}
		otp := guard.NewOTP(guard.OTPOptions{Policy: policy(func(p *guard.OTPPolicy) { p.OnStoreError = limit.FallbackOpen }),
			Counter: f, Codes: f, Sender: box, HMACKey: outageHMACKey, Now: func() time.Time { return now },
			LastStoreFailure: f.LastFailure, Volumes: vol})
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil || box.Count() != 1 {
			t.Fatalf("open, store down: %v, %d SMS; want sent by the fallback", err, box.Count())
		}
		if len(vol.takes) != 0 {
			t.Errorf("velocity store asked %d times while the fallback decided; want 0", len(vol.takes))
		}
	})

	t.Run("safe-listed numbers and mode off are not asked", func(t *testing.T) {
		vol := &fakeVolumes{}
		otp, _ := build(policy(func(p *guard.OTPPolicy) { p.SafeList = []string{"+234803"} }), vol, &guardtest.Outbox{})
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		otp, _ = build(policy(func(p *guard.OTPPolicy) { p.CountryVelocity.Mode = guard.VelocityOff }), vol, &guardtest.Outbox{})
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		if len(vol.takes) != 0 {
			t.Errorf("takes: %d, want 0", len(vol.takes))
		}
	})

	t.Run("a verified code credits its hour", func(t *testing.T) {
		vol := &fakeVolumes{}
		box := &guardtest.Outbox{}
		otp, _ := build(policy(nil), vol, box)
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		if _, err := otp.Verify(ctx, guard.VerifyRequest{Phone: "+2348031234567", Code: box.Last(t)}); err != nil {
			t.Fatal(err)
		}
		if len(vol.verified) != 1 || vol.verified[0] != hour {
			t.Errorf("verified: %v, want [%d]", vol.verified, hour)
		}
	})
}

// TestVelocityPolicyValidation: the new fields name themselves when wrong.
func TestVelocityPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*guard.OTPPolicy)
		want string
	}{
		{"bad mode", func(p *guard.OTPPolicy) { p.CountryVelocity.Mode = "on" }, "otp.country_velocity.mode"},
		{"zero floor", func(p *guard.OTPPolicy) { p.CountryVelocity.Floor = 0 }, "otp.country_velocity.floor"},
		{"factor below 1", func(p *guard.OTPPolicy) { p.CountryVelocity.Factor = 0.5 }, "otp.country_velocity.factor"},
		{"lookback not whole hours", func(p *guard.OTPPolicy) { p.CountryVelocity.Lookback = 90 * time.Minute }, "otp.country_velocity.lookback"},
		{"expected lower case", func(p *guard.OTPPolicy) { p.CountryVelocity.Expected = map[string]int64{"ng": 5} }, "otp.country_velocity.expected.ng"},
		{"depth twice", func(p *guard.OTPPolicy) {
			p.PrefixDepths = append(p.PrefixDepths, guard.PrefixWindow{Limit: 5, Window: time.Hour, DigitsDropped: 4})
		}, "otp.prefix_depths[2].digits_dropped"},
		{"delay too long", func(p *guard.OTPPolicy) { p.Conversion.Delay = time.Hour }, "otp.conversion.delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := guard.DefaultPolicies()
			tc.edit(&p.OTP)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error naming %s", err, tc.want)
			}
		})
	}
	p := guard.DefaultPolicies()
	p.OTP.CountryVelocity = guard.CountryVelocity{Mode: guard.VelocityOff}
	if err := p.Validate(); err != nil {
		t.Errorf("mode off with nothing else: %v, want valid", err)
	}
}
