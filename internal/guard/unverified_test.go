package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestUnverifiedBudgetSend: an untrusted send asks the store with the
// policy's unverified budget (off when its floor is 0), and the budget's
// refusal is unusual_volume until the minute ends, nothing sent.
func TestUnverifiedBudgetSend(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 30, 0, time.UTC)
	build := func(edit func(*guard.CountryVelocity), vol *fakeVolumes, box *smsBox) *guard.OTP {
		p := guard.DefaultPolicies()
		p.OTP.Cooldown = 0
		if edit != nil {
			edit(&p.OTP.CountryVelocity)
		}
		p.FillDefaults()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		st := newOutageStore()
		return guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: box, HMACKey: outageHMACKey,
			Now: func() time.Time { return now }, Volumes: vol})
	}
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(*guard.CountryVelocity)
		want guard.UnverifiedTake
	}{
		{"defaults", nil, guard.UnverifiedTake{Floor: 20, Share: 0.1, NormalDefault: 800, NormalMin: 200}},
		{"floor 0 is off", func(v *guard.CountryVelocity) { v.UnverifiedFloor = 0 }, guard.UnverifiedTake{}},
	}
	for _, tc := range cases {
		vol := &fakeVolumes{}
		if _, err := build(tc.edit, vol, &smsBox{}).Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		if len(vol.takes) != 1 || vol.takes[0].Unverified != tc.want {
			t.Errorf("%s: takes %+v, want one with the budget %+v", tc.name, vol.takes, tc.want)
		}
	}
	vol := &fakeVolumes{take: func(guard.VolumeTake) (guard.VolumeResult, error) {
		return guard.VolumeResult{Count: 30, Limit: 150, Unverified: 20}, nil
	}}
	box := &smsBox{}
	_, err := build(nil, vol, box).Send(ctx, guard.SendRequest{Phone: "+2348031234567"})
	wantCode(t, err, guard.CodeUnusualVolume)
	var e *guard.Error
	if !errors.As(err, &e) || e.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter: %v, want 30s (to the end of the minute)", e.RetryAfter)
	}
	if box.count() != 0 {
		t.Errorf("SMS sent: %d, want 0", box.count())
	}
}
