package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// eventLog records the audit events of an OTP service.
type eventLog struct {
	mu     sync.Mutex
	events []guard.Event
}

func (l *eventLog) Record(e guard.Event) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

// find is the first event whose Detail holds s.
func (l *eventLog) find(s string) (guard.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if strings.Contains(e.Detail, s) {
			return e, true
		}
	}
	return guard.Event{}, false
}

// acceptingChallenger holds every non-empty solution, each its own
// single use.
type acceptingChallenger struct{}

func (acceptingChallenger) Issue(string, time.Time) (guard.Challenge, error) {
	return guard.Challenge{Type: guard.ChallengePoW, Challenge: "c"}, nil
}

func (c acceptingChallenger) Check(_ context.Context, _, solution, _ string, now time.Time) (guard.Solution, error) {
	if solution == "" {
		return guard.Solution{}, guard.ErrBadSolution
	}
	return guard.Solution{ID: solution, Expires: now.Add(5 * time.Minute)}, nil
}

// carrierService is an OTP service over the real store on miniredis, its
// clock driven by the test: floor 50, factor 3, a day's lookback, history
// known from 20 sends, no minute share.
type carrierService struct {
	otp    *guard.OTP
	box    *guardtest.Outbox
	events *eventLog
	mu     sync.Mutex
	now    time.Time
}

func (s *carrierService) clock() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.now }

func (s *carrierService) advance(d time.Duration) { s.mu.Lock(); s.now = s.now.Add(d); s.mu.Unlock() }

func newCarrierService(t *testing.T, challenger bool) *carrierService {
	t.Helper()
	m := miniredis.RunT(t)
	st := store.NewRedis(redistest.Client(t, "redis://"+m.Addr()), redistest.Prefix())
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	v := &p.OTP.CountryVelocity
	v.Floor, v.Factor, v.Lookback, v.MinuteShare = 50, 3, 24*time.Hour, 0
	// One country's carriers: the cold room, whose windows run on Redis's
	// clock, which the driven hours do not move, is off (its own tests
	// are TestColdRoom*).
	v.ColdPerHour = 0
	p.OTP.Conversion.HistoryMinSends = 20
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &carrierService{box: &guardtest.Outbox{}, events: &eventLog{}, now: time.Date(2026, 3, 1, 10, 5, 0, 0, time.UTC)}
	o := guard.OTPOptions{Policy: p.OTP, Counter: st.Counters, Codes: st.Codes, Sender: s.box, HMACKey: outageHMACKey,
		Now: s.clock, Volumes: st.Velocity, Conversions: st.Conversions, Blocks: st.Blocks, Events: s.events}
	if challenger {
		o.Challenger = acceptingChallenger{}
	}
	s.otp = guard.NewOTP(o)
	t.Cleanup(s.otp.Close)
	return s
}

// sendVerify sends a code to phone and verifies it.
func (s *carrierService) sendVerify(t *testing.T, phone string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.otp.Send(ctx, guard.SendRequest{Phone: phone}); err != nil {
		t.Fatalf("send %s: %v", phone, err)
	}
	if _, err := s.otp.VerifyCode(ctx, guard.VerifyRequest{Phone: phone, Code: s.box.Code(phone)}); err != nil {
		t.Fatalf("verify %s: %v", phone, err)
	}
}

// TestCarrierBotSpendsItsShare: after two hours in which MTN's numbers
// made 90 % of Nigeria's verified sends and Glo's 10 %, a bot on Glo's
// ranges whose codes nobody verifies gets Glo's share of the hour (10 %
// of the country's 150) and is refused naming the carrier, while MTN's
// users still get their codes.
func TestCarrierBotSpendsItsShare(t *testing.T) {
	s := newCarrierService(t, false)
	n := 0
	for range 2 {
		for range 45 {
			n++
			s.sendVerify(t, fmt.Sprintf("+234803%07d", n))
		}
		for range 5 {
			n++
			s.sendVerify(t, fmt.Sprintf("+234805%07d", n))
		}
		s.advance(time.Hour)
	}
	ctx := context.Background()
	bot, err := 0, error(nil)
	for bot = 0; bot < 200; bot++ {
		if _, err = s.otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+2348051%06d", bot)}); err != nil {
			break
		}
	}
	var e *problem.Error
	if bot != 15 || !errors.As(err, &e) || e.Code != problem.CodeUnusualVolume || !strings.Contains(e.Message, "carrier") {
		t.Fatalf("the bot on Glo: %d sent, then %v; want 15, then unusual_volume naming the carrier", bot, err)
	}
	if want := guard.Usage(16, 15, time.Hour); e.Usage != want {
		t.Errorf("usage %q, want the carrier's %q", e.Usage, want)
	}
	if ev, ok := s.events.find("country=NG carrier=Glo "); !ok || ev.Carrier != "Glo" || ev.Action != guard.ActionVelocity {
		t.Errorf("audit: %+v (found %v), want a velocity event naming NG / Glo", ev, ok)
	}
	for i := range 30 {
		if _, err := s.otp.Send(ctx, guard.SendRequest{Phone: fmt.Sprintf("+2348032%06d", i)}); err != nil {
			t.Fatalf("MTN's user %d after the bot: %v", i, err)
		}
	}
}

// TestCarrierSolvedCut: a bot that solves every challenge on MTN's ranges
// and verifies nothing meets the solved tier's conversion watch, which
// cuts MTN's solved cap, not Nigeria's: Glo's new users, who solve and
// verify, keep the country's solved conversion up and still get their
// codes.
func TestCarrierSolvedCut(t *testing.T) {
	s := newCarrierService(t, true)
	ctx := context.Background()
	send := s.solvedSender()
	for i := range 25 {
		phone := fmt.Sprintf("+2348053%06d", i)
		if err := send(phone); err != nil {
			t.Fatalf("Glo's user %d: %v", i, err)
		}
		if _, err := s.otp.VerifyCode(ctx, guard.VerifyRequest{Phone: phone, Code: s.box.Code(phone)}); err != nil {
			t.Fatalf("Glo's user %d verifying: %v", i, err)
		}
	}
	for i := range 25 {
		if err := send(fmt.Sprintf("+2348033%06d", i)); err != nil {
			t.Fatalf("bot send %d: %v", i, err)
		}
	}
	s.advance(3 * time.Minute) // past conversion.delay: the bot's codes count unverified
	if err := send("+2348033100000"); err != nil {
		t.Fatalf("bot send after the delay: %v", err)
	}
	if err := s.otp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ev, ok := s.events.find("carrier=MTN")
	if !ok || ev.Action != guard.ActionConversion || ev.Outcome != guard.OutcomeQuarantined || ev.Carrier != "MTN" {
		t.Fatalf("audit: %+v (found %v), want the solved watch cutting NG / MTN", ev, ok)
	}
	if ev, ok := s.events.find("the country's solved-challenge cap cut"); ok {
		t.Errorf("audit: %+v, want the country's solved cap left whole", ev)
	}
	var e *problem.Error
	if err := send("+2348033100001"); !errors.As(err, &e) || e.Code != problem.CodeUnusualVolume || !strings.Contains(e.Message, "carrier") {
		t.Errorf("MTN after the cut: %v, want unusual_volume naming the carrier", err)
	}
	for i := range 10 {
		if err := send(fmt.Sprintf("+2348053%06d", 100+i)); err != nil {
			t.Fatalf("Glo's solved send %d after MTN's cut: %v", i, err)
		}
	}
}

// TestCarrierSolvedCutSpread: the same bot spread over MTN, Glo and
// Airtel moves Nigeria's solved conversion as well as each carrier's, and
// the watch cuts the country's solved cap, so the carriers' floors cannot
// add up to more than the country's cut.
func TestCarrierSolvedCutSpread(t *testing.T) {
	s := newCarrierService(t, true)
	ctx := context.Background()
	send := s.solvedSender()
	for _, r := range []string{"803", "805", "802"} { // MTN, Glo, Airtel
		for i := range 10 {
			if err := send(fmt.Sprintf("+234%s3%06d", r, i)); err != nil {
				t.Fatalf("bot send %d to +234%s: %v", i, r, err)
			}
		}
	}
	s.advance(3 * time.Minute)
	if err := send("+2348033100000"); err != nil {
		t.Fatalf("bot send after the delay: %v", err)
	}
	if err := s.otp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ev, ok := s.events.find("the country's solved-challenge cap cut")
	if !ok || ev.Action != guard.ActionConversion || ev.Outcome != guard.OutcomeQuarantined || ev.Carrier != "" || ev.Country != "NG" {
		t.Fatalf("audit: %+v (found %v), want the solved watch cutting NG's solved cap", ev, ok)
	}
	for _, phone := range []string{"+2348023200000", "+2348053200000", "+2348093200000"} {
		var e *problem.Error
		if err := send(phone); !errors.As(err, &e) || e.Code != problem.CodeUnusualVolume || strings.Contains(e.Message, "carrier") {
			t.Errorf("%s after the country's cut: %v, want unusual_volume for the country", phone, err)
		}
	}
}

// solvedSender sends a code after a solved challenge, each with a
// solution of its own.
func (s *carrierService) solvedSender() func(phone string) error {
	n := 0
	return func(phone string) error {
		n++
		_, err := s.otp.Send(context.Background(), guard.SendRequest{Phone: phone, Challenge: fmt.Sprintf("solution-%d", n)})
		return err
	}
}

// TestCarrierTake: what a send asks of the velocity store for its
// carrier, and what its refund and its verify's credit carry: the
// carrier's counts beside the country's; nothing with carrier_split off.
func TestCarrierTake(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 0, 0, time.UTC)
	ctx := context.Background()
	mtn := limit.Key{Space: "otp:vel", ID: "NG", Name: "c:mtn"}
	for _, split := range []bool{true, false} {
		p := guard.DefaultPolicies()
		p.OTP.Cooldown = 0
		p.OTP.CountryVelocity.CarrierSplit = split
		vol := &fakeVolumes{}
		box := &guardtest.Outbox{}
		st := guardtest.NewOutageStore()
		otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: box, HMACKey: outageHMACKey,
			Now: func() time.Time { return now }, Volumes: vol})
		if _, err := otp.Send(ctx, guard.SendRequest{Phone: "+2348031234567"}); err != nil {
			t.Fatal(err)
		}
		if _, err := otp.VerifyCode(ctx, guard.VerifyRequest{Phone: "+2348031234567", Code: box.Code("+2348031234567")}); err != nil {
			t.Fatal(err)
		}
		box.SetFail(&problem.Error{Code: problem.CodeProviderUnavailable, Message: "refused", Err: guard.ErrNotSent})
		_, _ = otp.Send(ctx, guard.SendRequest{Phone: "+2348031234568"})
		want, wantKey := guard.CarrierTake{Name: "MTN", Key: mtn, Since: limit.Key{Space: "otp:vel", ID: "NG", Name: "carriers"},
			FloorShare: guard.DefaultCarrierFloorShare}, mtn
		if !split {
			want, wantKey = guard.CarrierTake{}, limit.Key{}
		}
		if len(vol.takes) != 2 || vol.takes[0].Carrier != want {
			t.Errorf("split %v: takes %+v, want the carrier %+v", split, vol.takes, want)
		}
		if len(vol.verifiedCarriers) != 1 || vol.verifiedCarriers[0] != wantKey {
			t.Errorf("split %v: verify credited %v, want %v", split, vol.verifiedCarriers, wantKey)
		}
		if len(vol.refundCarriers) != 1 || vol.refundCarriers[0] != wantKey {
			t.Errorf("split %v: refunds %v, want %v", split, vol.refundCarriers, wantKey)
		}
	}
}
