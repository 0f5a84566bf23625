package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
)

// scoredLookup answers the network's risk score from a table: 10 (low)
// for the numbers in low, 50 (between) for any other.
type scoredLookup struct{ low map[string]bool }

func (l scoredLookup) LookupRisk(_ context.Context, e164 string) (guard.RiskAnswer, error) {
	if l.low[e164] {
		return guard.RiskAnswer{Score: 10}, nil
	}
	return guard.RiskAnswer{Score: 50}, nil
}

// TestVouchedSolvedPastTheCut: with the solved cap cut (a bot's solved
// sends went unverified) and the vouched tier's cap spent, a number the
// network scores low that solves its challenge is held to the solved cap
// without its cut, not refused: a real surge's new numbers, most of which
// the network vouches for, keep their codes behind a bot. The bot's
// numbers scored between keep meeting the cut, and the low-scored ones
// get no more than the uncut cap. While the tier's cap has room, such a
// send takes its place there and not its uncut place (one step tries the
// tier's first): the uncut cap's count stays exact. On a real Redis and
// on miniredis.
func TestVouchedSolvedPastTheCut(t *testing.T) { onRedisAndMiniredis(t, testVouchedSolvedPastTheCut) }

func testVouchedSolvedPastTheCut(t *testing.T, st *store.Redis) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Hour).Add(10 * time.Minute)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	v := &p.OTP.CountryVelocity
	v.Floor, v.MinuteShare, v.ColdPerHour = 1, 0, 0
	p.OTP.Challenge.Floor = 10 // cut: 1
	p.OTP.Risk.Mode, p.OTP.Risk.VouchedFloor = guard.RiskOn, 3
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	vouched := func(n int) string { return fmt.Sprintf("+44740020%04d", n) }
	low := map[string]bool{}
	for n := range 20 {
		low[vouched(n)] = true
	}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st.Counters, Codes: st.Codes, Sender: &guardtest.Outbox{},
		HMACKey: outageHMACKey, Now: func() time.Time { return now }, Volumes: st.Velocity, Conversions: st.Conversions,
		Blocks: st.Blocks, Challenger: acceptingChallenger{}, RiskLookup: scoredLookup{low: low}, Risks: st.Risks})
	t.Cleanup(otp.Close)
	solution := 0
	// send sends to phone, and again with a solution if challenged.
	send := func(phone string) error {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: phone})
		if problem.CodeOf(err) != problem.CodeChallengeRequired {
			return err
		}
		solution++
		_, err = otp.Send(ctx, guard.SendRequest{Phone: phone, Challenge: fmt.Sprintf("solution-%d", solution)})
		return err
	}
	if err := send("+447400100000"); err != nil {
		t.Fatalf("the velocity floor's send: %v", err)
	}
	// The solved tier's conversion watch has cut GB's solved cap to 1.
	cut := limit.Key{Space: "otp:vel", ID: "GB", Name: "solvedcut"}
	if err := st.Velocity.Quarantine(ctx, cut, now.Add(time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := send("+447400100001"); err != nil {
		t.Fatalf("the bot's first solved send, within the cut: %v", err)
	}
	wantCode(t, send("+447400100002"), problem.CodeUnusualVolume)
	// Numbers challenged while scored between, then scored low (the
	// cached score cleared): each solved send, refused by the cut, takes
	// a place in the vouched tier, which has room, and no uncut place.
	for n := 20; n < 22; n++ {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: vouched(n)})
		wantCode(t, err, problem.CodeChallengeRequired)
		low[vouched(n)] = true
		if _, err := otp.ClearRisk(ctx, vouched(n), "test"); err != nil {
			t.Fatal(err)
		}
		solution++
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: vouched(n), Challenge: fmt.Sprintf("solution-%d", solution)}); err != nil {
			t.Fatalf("low-scored solved send %d, the vouched tier's room: %v, want sent", n, err)
		}
	}
	capTake := guard.SolvedCapTake(p.OTP, "GB", "", "", now)
	caps, err := st.AbuseCounters.ReadSolvedCaps(ctx, []guard.VolumeTake{capTake})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := caps[0].Used, int64(1); got != want {
		t.Errorf("the solved cap's count after 2 vouched sends past the cut: %d, want %d (the bot's): no uncut place taken", got, want)
	}
	if err := send(vouched(0)); err != nil {
		t.Fatalf("a low score in the vouched tier: %v", err)
	}
	// The vouched tier's cap (3) is spent too: the low-scored numbers
	// that solve meet the solved cap without its cut, 10, of which the
	// bot's send took 1.
	for n := 1; n <= 9; n++ {
		if err := send(vouched(n)); err != nil {
			t.Fatalf("low-scored solved send %d, past the cut: %v, want sent", n, err)
		}
	}
	wantCode(t, send(vouched(10)), problem.CodeUnusualVolume)
	wantCode(t, send("+447400100003"), problem.CodeUnusualVolume)
}
