package guard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
)

// countedLookup answers the network's risk score from a table (def for
// any other number) and counts the lookups.
type countedLookup struct {
	scores map[string]int
	def    int
	calls  atomic.Int64
}

func (l *countedLookup) LookupRisk(_ context.Context, e164 string) (guard.RiskAnswer, error) {
	l.calls.Add(1)
	if s, ok := l.scores[e164]; ok {
		return guard.RiskAnswer{Score: s}, nil
	}
	return guard.RiskAnswer{Score: l.def}, nil
}

// TestContestedRoom: once the velocity rule has refused an untrusted send
// of a country, a send the room still takes, in that hour or the next,
// has its risk score asked: a number scored high is refused and its place
// goes back to the room, for the next number's. A room no rule refused
// for an hour asks nothing of the sends it takes. On a real Redis and on
// miniredis.
func TestContestedRoom(t *testing.T) { onRedisAndMiniredis(t, testContestedRoom) }

func testContestedRoom(t *testing.T, st *store.Redis) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(10 * time.Minute)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	v := &p.OTP.CountryVelocity
	v.Floor, v.MinuteShare, v.ColdPerHour = 2, 0, 0
	p.OTP.Risk.Mode = guard.RiskOn
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	high := func(n int) string { return fmt.Sprintf("+4474003%05d", n) }
	mid := func(n int) string { return fmt.Sprintf("+4474004%05d", n) }
	lookup := &countedLookup{scores: map[string]int{}, def: 50}
	for n := range 10 {
		lookup.scores[high(n)] = 90
	}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st.Counters, Codes: st.Codes, Sender: &guardtest.Outbox{},
		HMACKey: outageHMACKey, Now: func() time.Time { return now }, Volumes: st.Velocity, Conversions: st.Conversions,
		Blocks: st.Blocks, Challenger: acceptingChallenger{}, RiskLookup: lookup, Risks: st.Risks})
	t.Cleanup(otp.Close)
	send := func(phone string) error {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: phone})
		return err
	}
	wantLookups := func(step string, want int64) {
		t.Helper()
		if got := lookup.calls.Load(); got != want {
			t.Fatalf("%s: %d lookups, want %d", step, got, want)
		}
	}

	// A quiet room: its two places go to the first two, a high score
	// among them, unasked.
	if err := send(high(0)); err != nil {
		t.Fatalf("a quiet room's first send: %v", err)
	}
	if err := send(mid(0)); err != nil {
		t.Fatalf("a quiet room's second send: %v", err)
	}
	wantLookups("a quiet room", 0)
	// The third is refused: its score is asked (mid: the challenge), and
	// the room is contested from now on.
	wantCode(t, send(mid(1)), problem.CodeChallengeRequired)
	wantLookups("the room's refusal", 1)

	// The next hour: the room has its places again, and asks the score
	// of each send it takes. A high score is refused and its place given
	// back, so both places still go to the numbers scored between.
	now = now.Add(time.Hour)
	wantCode(t, send(high(1)), problem.CodeHighRiskNumber)
	wantLookups("a contested room's high-scored send", 2)
	for n := 2; n <= 3; n++ {
		if err := send(mid(n)); err != nil {
			t.Fatalf("a contested room's send %d, scored between: %v", n, err)
		}
	}
	wantLookups("a contested room's sends", 4)
	wantCode(t, send(mid(4)), problem.CodeChallengeRequired)

	// Two hours on, the last refusal an hour and more ago: the room is
	// quiet again and asks nothing.
	now = now.Add(2 * time.Hour)
	calls := lookup.calls.Load()
	if err := send(high(2)); err != nil {
		t.Fatalf("a room quiet again: %v", err)
	}
	wantLookups("a room quiet again", calls)
}
