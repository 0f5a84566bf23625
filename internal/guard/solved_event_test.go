package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestSolvedEventMark: the audit event of a send after a solved challenge
// is marked Solved, sent or refused by the solved cap, whose refusal
// answers unusual_volume as the velocity rule's does; the velocity rule's
// own refusal, a challenge and a new send are not marked.
func TestSolvedEventMark(t *testing.T) {
	type step struct {
		name, phone, solution string
		challenger            bool // the service has challenges on
		wantOutcome           string
		wantSolved            bool
	}
	steps := []step{
		{"a new send", "+447400100001", "", true, guard.OutcomeSent, false},
		{"a new send past the velocity floor: challenged", "+447400100002", "", true, "challenge_required", false},
		{"its solved send", "+447400100002", "s1", true, guard.OutcomeSent, true},
		{"a solved send past the solved cap", "+447400100003", "s2", true, string(problem.CodeUnusualVolume), true},
		{"a new send, no challenges", "+447400100004", "", false, guard.OutcomeSent, false},
		{"the velocity rule's refusal", "+447400100005", "", false, string(problem.CodeUnusualVolume), false},
	}
	services := map[bool]*eventLog{}
	otps := map[bool]*guard.OTP{}
	for _, challenger := range []bool{true, false} {
		otps[challenger], services[challenger] = solvedService(t, challenger)
	}
	for _, st := range steps {
		log := services[st.challenger]
		log.mu.Lock()
		before := len(log.events)
		log.mu.Unlock()
		_, _ = otps[st.challenger].Send(context.Background(), guard.SendRequest{Phone: st.phone, Challenge: st.solution})
		log.mu.Lock()
		var got []guard.Event // the send's, not an alert's
		for _, e := range log.events[before:] {
			if e.Action == guard.ActionOTPSend {
				got = append(got, e)
			}
		}
		log.mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("%s: send events %+v, want one", st.name, got)
		}
		if got[0].Outcome != st.wantOutcome || got[0].Solved != st.wantSolved {
			t.Errorf("%s: got %s solved=%t, want %s solved=%t", st.name, got[0].Outcome, got[0].Solved, st.wantOutcome, st.wantSolved)
		}
	}
}

// solvedService is an OTP service on miniredis whose velocity floor and
// solved cap are 1 send an hour, with challenges (accepting every
// solution) or without.
func solvedService(t *testing.T, challenger bool) (*guard.OTP, *eventLog) {
	t.Helper()
	m := miniredis.RunT(t)
	st := store.NewRedis(redistest.Client(t, "redis://"+m.Addr()), redistest.Prefix())
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Floor, p.OTP.CountryVelocity.MinuteShare, p.OTP.CountryVelocity.ColdPerHour = 1, 0, 0
	p.OTP.Challenge.Floor = 1
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	events := &eventLog{}
	now := time.Date(2026, 3, 1, 10, 5, 0, 0, time.UTC)
	o := guard.OTPOptions{Policy: p.OTP, Counter: st.Counters, Codes: st.Codes, Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey,
		Now: func() time.Time { return now }, Volumes: st.Velocity, Conversions: st.Conversions, Blocks: st.Blocks, Events: events}
	if challenger {
		o.Challenger = acceptingChallenger{}
	}
	otp := guard.NewOTP(o)
	t.Cleanup(otp.Close)
	return otp, events
}
