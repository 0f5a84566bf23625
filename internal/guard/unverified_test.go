package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
)

// TestUnverifiedBudgetSend: an untrusted send asks the store with the
// policy's unverified budget (off when its floor is 0), and the budget's
// refusal is unusual_volume until the minute ends, nothing sent.
func TestUnverifiedBudgetSend(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 30, 0, time.UTC)
	build := func(edit func(*guard.CountryVelocity), vol *fakeVolumes, box *guardtest.Outbox, ch guard.Challenger) *guard.OTP {
		p := guard.DefaultPolicies()
		p.OTP.Cooldown = 0
		if edit != nil {
			edit(&p.OTP.CountryVelocity)
		}
		p.FillDefaults()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		st := guardtest.NewOutageStore()
		return guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: box, HMACKey: outageHMACKey,
			Now: func() time.Time { return now }, Volumes: vol, Challenger: ch})
	}
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(*guard.CountryVelocity)
		ch   guard.Challenger
		want guard.UnverifiedTake
	}{
		{"defaults", nil, fakeChallenger{}, guard.UnverifiedTake{Floor: 20, Share: 0.1, NormalDefault: 800, NormalMin: 200}},
		{"floor 0 is off", func(v *guard.CountryVelocity) { v.UnverifiedFloor = 0 }, fakeChallenger{}, guard.UnverifiedTake{}},
		{"off without challenges: never a refusal", nil, nil, guard.UnverifiedTake{}},
	}
	for _, tc := range cases {
		vol := &fakeVolumes{}
		if _, err := build(tc.edit, vol, &guardtest.Outbox{}, tc.ch).Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		if len(vol.takes) != 1 || vol.takes[0].Unverified != tc.want {
			t.Errorf("%s: takes %+v, want one with the budget %+v", tc.name, vol.takes, tc.want)
		}
	}
	vol := &fakeVolumes{take: func(guard.VolumeTake) (guard.VolumeResult, error) {
		return guard.VolumeResult{Count: 30, Limit: 150, Unverified: 20}, nil
	}}
	box := &guardtest.Outbox{}
	_, err := build(nil, vol, box, fakeChallenger{}).Send(ctx, guard.SendRequest{Phone: "+2348031234567"})
	wantCode(t, err, problem.CodeChallengeRequired)
	var e *problem.Error
	if !errors.As(err, &e) || e.Challenge == nil {
		t.Fatalf("%v: want a challenge", err)
	}
	var cause *problem.Error
	if !errors.As(e.Err, &cause) || cause.Code != problem.CodeUnusualVolume || cause.RetryAfter != 30*time.Second {
		t.Errorf("cause %v, want unusual_volume until the end of the minute (30s)", e.Err)
	}
	if box.Count() != 0 {
		t.Errorf("SMS sent: %d, want 0", box.Count())
	}
}

// fakeChallenger issues proof-of-work challenges and holds no solution.
type fakeChallenger struct{}

func (fakeChallenger) Issue(string, time.Time) (guard.Challenge, error) {
	return guard.Challenge{Type: guard.ChallengePoW, Challenge: "c"}, nil
}

func (fakeChallenger) Check(context.Context, string, string, string, time.Time) (guard.Solution, error) {
	return guard.Solution{}, guard.ErrBadSolution
}
