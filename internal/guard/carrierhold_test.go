package guard_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestHeldMarksByCarrier, on the real store (miniredis) and a driven
// clock: three hours of Nigeria's verified sends, MTN's numbers 70 % and
// Glo's 30 %; in the next hour's first minutes 3 MTN users, then a farm on
// Glo's ranges that verifies every code it gets, running the country's
// hour above its line (the floor of 10 at :05), then one more MTN user.
// With the carriers splitting the country, the farm's marks are held past
// Glo's part of the line (30 % of 10: 3), and the MTN user verifying in
// that same hour earns a mark that counts at once (MTN's part is 7, its
// hour has 4): the audit names Glo. Without the split the country judges
// as before: the farm's marks past the country's line, and the MTN
// user's, are held.
func TestHeldMarksByCarrier(t *testing.T) {
	cases := []struct {
		name        string
		split       bool
		farmHeld    int // of the farm's 9 marks
		userTier    guard.Tier
		wantCarrier string // the held audit's and metric's carrier
	}{
		{"the carriers split the country", true, 6, guard.TierTrusted, "Glo"},
		{"without the split", false, 2, guard.TierNew, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, held := newHoldService(t, tc.split)
			n := 0
			for range 3 { // each hour within the floor of 10, 30 % Glo's
				for range 7 {
					n++
					s.sendVerify(t, fmt.Sprintf("+234803%07d", n))
				}
				for range 3 {
					n++
					s.sendVerify(t, fmt.Sprintf("+234805%07d", n))
				}
				s.advance(time.Hour)
			}
			for i := range 3 { // MTN's users of the hour, before the farm
				s.sendVerify(t, fmt.Sprintf("+2348039%06d", i))
			}
			held.reset()
			for i := range 9 { // Glo's room: 30 % of the hour's 30
				s.sendVerify(t, fmt.Sprintf("+2348051%06d", i))
			}
			if got := held.count("NG", tc.wantCarrier); got != tc.farmHeld {
				t.Errorf("the farm's held marks: got %d (%v), want %d naming carrier %q", got, held.all(), tc.farmHeld, tc.wantCarrier)
			}
			user := "+2348039100000"
			s.sendVerify(t, user)
			s.advance(24 * time.Hour)
			res, err := s.otp.Send(context.Background(), guard.SendRequest{Phone: user})
			if err != nil {
				t.Fatalf("the MTN user's next send: %v", err)
			}
			if res.Tier != tc.userTier {
				t.Errorf("the MTN user's next day: tier %v, want %v", res.Tier, tc.userTier)
			}
			ev, ok := s.events.find("trust marks earned this hour")
			if !ok || ev.Action != guard.ActionTrustHeld || ev.Carrier != tc.wantCarrier {
				t.Errorf("held audit: %+v (found %v), want otp.trust.held naming carrier %q", ev, ok, tc.wantCarrier)
			}
		})
	}
}

// heldCounts is the TrustMarkHeld hook's count by country and carrier.
type heldCounts struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (h *heldCounts) add(country, carrier string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[[2]string]int{}
	}
	h.n[[2]string{country, carrier}]++
}

func (h *heldCounts) reset() { h.mu.Lock(); h.n = nil; h.mu.Unlock() }

func (h *heldCounts) count(country, carrier string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[[2]string{country, carrier}]
}

func (h *heldCounts) all() map[[2]string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[[2]string]int{}
	for k, v := range h.n {
		out[k] = v
	}
	return out
}

// newHoldService is newCarrierService with trust marks held for the
// default 72h, the floor 10 (each carrier's 1), and the carriers
// splitting the country or not (split).
func newHoldService(t *testing.T, split bool) (*carrierService, *heldCounts) {
	t.Helper()
	m := miniredis.RunT(t)
	st := store.NewRedis(redistest.Client(t, "redis://"+m.Addr()), redistest.Prefix())
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	v := &p.OTP.CountryVelocity
	v.Floor, v.Factor, v.Lookback, v.MinuteShare, v.ColdPerHour = 10, 3, 24*time.Hour, 0, 0
	v.CarrierSplit = split
	p.OTP.Conversion.HistoryMinSends = 20
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	held := &heldCounts{}
	s := &carrierService{box: &guardtest.Outbox{}, events: &eventLog{}, now: time.Date(2026, 3, 1, 10, 5, 0, 0, time.UTC)}
	s.otp = guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st.Counters, Codes: st.Codes, Sender: s.box, HMACKey: outageHMACKey,
		Now: s.clock, Volumes: st.Velocity, Conversions: st.Conversions, Blocks: st.Blocks, Events: s.events,
		Trusts: st.TrustMarks, Abuse: guard.AbuseHooks{TrustMarkHeld: held.add}})
	t.Cleanup(s.otp.Close)
	return s, held
}
