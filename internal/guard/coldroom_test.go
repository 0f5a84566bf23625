package guard_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// coldPlans are where the mobiles of a few countries start (the country
// code and the first digits) and how many digits follow.
var coldPlans = map[string]struct {
	prefix string
	digits int
}{
	"DE": {"+49151", 8}, "FR": {"+336", 8}, "NG": {"+234803", 7}, "IN": {"+9198", 8},
	"ES": {"+346", 8}, "NL": {"+316", 8}, "KE": {"+2547", 8}, "BR": {"+55119", 8}, "IT": {"+39347", 7},
}

// mobileOf is the n-th (n < 1000) of a run of valid, distinct mobiles of
// region, spread over prefixes.
func mobileOf(t testing.TB, region string, n int) string {
	t.Helper()
	if region == "GB" {
		return gb(n)
	}
	pl, ok := coldPlans[region]
	if !ok {
		t.Fatalf("no plan for %s", region)
	}
	mod := int(math.Pow10(pl.digits))
	for k := n; k < mod; k += 1000 {
		s := fmt.Sprintf("%s%0*d", pl.prefix, pl.digits, (k*7919+12345)%mod)
		if p, err := guard.ParsePhone(s, ""); err == nil && p.Region == region && p.Type() == "mobile" {
			return s
		}
	}
	t.Fatalf("no mobile of %s for %d", region, n)
	return ""
}

// coldFleet is n OTP instances on one real Redis (each its own client and
// round-trip count), one clock, one outbox.
type coldFleet struct {
	otps    []*guard.OTP
	history *guard.OTP // the room off: it gives countries their history
	rts     []*redistest.RoundTrips
	rdb     *redis.Client
	roomKey string // the room's hour window, as stored
	box     *guardtest.Outbox
	events  *guardtest.Events
	refused atomic.Int64 // ColdRoomRefused
	now     atomic.Int64 // unix seconds of the service's clock
}

// newColdFleet builds n instances with the default policy, no cooldown,
// no minute share, the room at perHour and perDay, and edit; ch (nil:
// none) is their challenger. The clock starts 20 minutes into the hour
// under way.
func newColdFleet(t *testing.T, n int, perHour, perDay int64, edit func(*guard.OTPPolicy), ch guard.Challenger) *coldFleet {
	t.Helper()
	return newColdFleetOn(t, n, perHour, perDay, edit, ch, true)
}

// newColdFleetOn is newColdFleet, with the conversion watch (and the
// room's audit claims, which share its store) only when watch: the watch
// counts on the instance's client in the background, which a round-trip
// count must not see.
func newColdFleetOn(t *testing.T, n int, perHour, perDay int64, edit func(*guard.OTPPolicy), ch guard.Challenger, watch bool) *coldFleet {
	t.Helper()
	guard.WarmPhoneMetadata()
	tg := redistest.New(t)
	f := &coldFleet{box: &guardtest.Outbox{}, events: &guardtest.Events{}, roomKey: tg.Prefix + "otp:cold:{global}:hour"}
	f.now.Store(time.Now().Truncate(time.Hour).Add(20 * time.Minute).Unix())
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.CountryVelocity.ColdPerHour, p.OTP.CountryVelocity.ColdPerDay = perHour, perDay
	if edit != nil {
		edit(&p.OTP)
	}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	build := func(p guard.OTPPolicy) (*guard.OTP, *redistest.RoundTrips, *redis.Client) {
		s, rt, rdb := redistest.StoreAt(t, tg)
		o := guard.OTPOptions{Policy: p, Counter: s.Counters, Codes: s.Codes, Sender: f.box,
			Now: f.clock, HMACKey: []byte("0123456789abcdef0123456789abcdef"), Volumes: s.Velocity, Trusts: s.TrustMarks,
			Events: f.events, Challenger: ch, Abuse: guard.AbuseHooks{ColdRoomRefused: func(string) { f.refused.Add(1) }}}
		if watch {
			o.Conversions = s.Conversions
		}
		otp := guard.NewOTP(o)
		t.Cleanup(otp.Close)
		return otp, rt, rdb
	}
	for range n {
		otp, rt, rdb := build(p.OTP)
		f.otps, f.rts = append(f.otps, otp), append(f.rts, rt)
		f.rdb = rdb
	}
	off := p.OTP
	off.CountryVelocity.ColdPerHour = 0
	f.history, _, _ = build(off)
	return f
}

func (f *coldFleet) clock() time.Time { return time.Unix(f.now.Load(), 0) }

// room is the room's hour window's count.
func (f *coldFleet) room(t *testing.T) int64 {
	t.Helper()
	n, err := f.rdb.Get(context.Background(), f.roomKey).Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return n
}

// send sends from instance i to phone (address n), untrusted unless
// account.
func (f *coldFleet) send(i int, phone string, n int, account bool) error {
	_, err := f.otps[i].Send(context.Background(), guard.SendRequest{Phone: phone,
		ClientIP: fmt.Sprintf("198.51.%d.%d", n/250, n%250+1), Account: account})
	return err
}

// warmHistoryAgo is how long before the clock a test's verified history
// is written: a day and an hour, since only hours that ended a day ago or
// more warm a country.
const warmHistoryAgo = 25 * 3600

// warmUp gives region a warmth of n (warmHistory) from the fleet's
// instance with the room off (the room's windows run on Redis's clock,
// not the service's). No instance of the fleet has read it.
func (f *coldFleet) warmUp(t *testing.T, region string, n int) {
	t.Helper()
	warmHistory(t, f.history, f.box, &f.now, region, n, n)
}

// padHistory writes the hours of history before warmHistory's day-old
// hour (padHistory of warmHistory) from the fleet's history instance.
func (f *coldFleet) padHistory(t *testing.T, region string, sends, verified int) {
	t.Helper()
	padHistory(t, f.history, f.box, &f.now, region, sends, verified)
}

// historyAt is sendHistory from the fleet's instance with the room off.
func (f *coldFleet) historyAt(t *testing.T, region string, sends, verified int, ago int64, account bool, first int) {
	t.Helper()
	sendHistory(t, f.history, f.box, &f.now, region, sends, verified, ago, account, first)
}

// warmHistory gives region, through otp and the store, a verified history
// that warms it to n: a day and an hour before the service's clock (now),
// n sends, each verified, and as many hours of n sends before it, each
// with verified of them verified, as bring the day-old hours to
// conversion.history_min_sends sends, which warming takes
// (cold_warm_conversion).
func warmHistory(t *testing.T, otp *guard.OTP, box *guardtest.Outbox, now *atomic.Int64, region string, n, verified int) {
	t.Helper()
	sendHistory(t, otp, box, now, region, n, n, warmHistoryAgo, false, 900)
	padHistory(t, otp, box, now, region, n, verified)
}

// padHistory writes hours of sends (verified of each verified) to new
// numbers of region before warmHistory's day-old hour, until the day-old
// hours hold conversion.history_min_sends sends with that hour's.
func padHistory(t *testing.T, otp *guard.OTP, box *guardtest.Outbox, now *atomic.Int64, region string, sends, verified int) {
	t.Helper()
	for h := 1; h*sends < guard.DefaultHistoryMin; h++ {
		sendHistory(t, otp, box, now, region, sends, verified, warmHistoryAgo+int64(h)*3600, false, 3000+h*sends)
	}
}

// sendHistory has otp send codes to sends new numbers of region (mobileOf
// from first) ago seconds before the service's clock (now), each from an
// address of its own, and verifies the first verified of them; account
// sends them in the trusted tier (the app's account flag).
func sendHistory(t *testing.T, otp *guard.OTP, box *guardtest.Outbox, now *atomic.Int64, region string, sends, verified int, ago int64, account bool, first int) {
	t.Helper()
	now.Add(-ago)
	defer now.Add(ago)
	for k := range sends {
		phone := mobileOf(t, region, first+k)
		if _, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone, Account: account,
			ClientIP: fmt.Sprintf("192.0.%d.%d", 2+(first+k)/250%200, (first+k)%250+1)}); err != nil {
			t.Fatalf("history send %d to %s: %v", k, region, err)
		}
		if k >= verified {
			continue
		}
		if _, err := otp.Verify(context.Background(), guard.VerifyRequest{Phone: phone, Code: box.Code(phone)}); err != nil {
			t.Fatalf("history verify %d: %v", k, err)
		}
	}
}

// TestColdRoomSharedByCountries: the untrusted sends of four countries
// without history, each far under its own floor, share one room: the
// 31st of the hour is refused (unusual_volume, or a challenge when
// challenges are on), counted in the metric, and audited once.
func TestColdRoomSharedByCountries(t *testing.T) {
	for _, tc := range []struct {
		name string
		ch   guard.Challenger
		want problem.Code
	}{
		{"challenges off", nil, problem.CodeUnusualVolume},
		{"challenges on", fakeChallenger{}, problem.CodeChallengeRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newColdFleet(t, 1, 30, 150, nil, tc.ch)
			countries := []string{"DE", "FR", "NG", "ES"}
			for n := range 36 {
				err := f.send(0, mobileOf(t, countries[n%4], n), n, false)
				want := problem.Code("")
				if n >= 30 {
					want = tc.want
				}
				if got := problem.CodeOf(err); got != want {
					t.Fatalf("send %d (%s): %q (%v), want %q", n+1, countries[n%4], got, err, want)
				}
			}
			if got := f.box.Count(); got != 30 {
				t.Errorf("SMS sent: %d, want 30", got)
			}
			if got := f.room(t); got != 30 {
				t.Errorf("the room's count: %d, want 30 (its refused hits given back)", got)
			}
			if got := f.refused.Load(); got != 6 {
				t.Errorf("ColdRoomRefused: %d, want 6", got)
			}
			var alerts int
			for _, e := range f.events.Action(guard.ActionVelocity) {
				if strings.Contains(e.Detail, "cold room spent") {
					alerts++
				}
			}
			if alerts != 1 {
				t.Errorf("cold room audit events: %d, want 1 (once per hour)", alerts)
			}
		})
	}
}

// solvingChallenger accepts every solution as a solved challenge.
type solvingChallenger struct{ fakeChallenger }

func (solvingChallenger) Check(_ context.Context, _, solution, _ string, now time.Time) (guard.Solution, error) {
	return guard.Solution{ID: solution, Expires: now.Add(5 * time.Minute)}, nil
}

// TestColdRoomSpares: a declared country, a country whose verified
// history reached cold_below, trusted (account) sends, solved sends and
// safe-listed numbers take nothing of the room: the cold sends after
// them still get all of it.
func TestColdRoomSpares(t *testing.T) {
	f := newColdFleet(t, 2, 3, 10, func(p *guard.OTPPolicy) {
		p.CountryVelocity.Expected = map[string]int64{"IN": 60}
		p.SafeList = []string{"+316"}
	}, solvingChallenger{})
	f.warmUp(t, "GB", guard.DefaultColdBelow)
	ctx := context.Background()
	for n := range 4 {
		if err := f.send(1, mobileOf(t, "IN", n), n, false); err != nil {
			t.Fatalf("declared country, send %d: %v", n+1, err)
		}
		if err := f.send(1, mobileOf(t, "GB", n), 10+n, false); err != nil {
			t.Fatalf("warm country, send %d: %v", n+1, err)
		}
		if err := f.send(1, mobileOf(t, "FR", n), 20+n, true); err != nil {
			t.Fatalf("account send %d: %v", n+1, err)
		}
		if err := f.send(1, mobileOf(t, "NL", n), 30+n, false); err != nil {
			t.Fatalf("safe-listed send %d: %v", n+1, err)
		}
		if _, err := f.otps[1].Send(ctx, guard.SendRequest{Phone: mobileOf(t, "KE", n), ClientIP: fmt.Sprintf("203.0.113.%d", n+1),
			Challenge: fmt.Sprintf("solved-%d", n)}); err != nil {
			t.Fatalf("solved send %d: %v", n+1, err)
		}
	}
	if got := f.room(t); got != 0 {
		t.Errorf("the room's count after the spared sends: %d, want 0", got)
	}
	sent := 0
	for n := range 5 {
		switch err := f.send(n%2, mobileOf(t, "DE", n), 40+n, false); problem.CodeOf(err) {
		case "":
			sent++
		case problem.CodeChallengeRequired:
		default:
			t.Fatalf("cold send %d: %v", n+1, err)
		}
	}
	if sent != 3 {
		t.Errorf("cold sends after the spared ones: %d sent, want 3 (the whole room)", sent)
	}
}

// TestColdRoomLearnsWarm: an instance with no reading of a warm country
// takes the room for its first send, then gives it back once the reply
// shows the country warm (one refund round trip, 3 in all), and sends
// without it after (2). With the room spent, the warm country's first
// send is refused by the room in the round trip and decided without it
// from that same round trip: sent, the room still exactly full.
func TestColdRoomLearnsWarm(t *testing.T) {
	f := newColdFleetOn(t, 3, 3, 10, nil, nil, false)
	f.warmUp(t, "GB", guard.DefaultColdBelow)
	// Instance 1, room not spent: taken, then given back.
	for i, want := range []int64{3, 2} {
		f.rts[1].Reset()
		if err := f.send(1, mobileOf(t, "GB", i), i, false); err != nil {
			t.Fatalf("warm send %d: %v", i+1, err)
		}
		if got := f.rts[1].N(); got != want {
			t.Errorf("warm send %d on a fresh instance: %d round trips, want %d", i+1, got, want)
		}
		if got := f.room(t); got != 0 {
			t.Errorf("after warm send %d: the room holds %d, want 0", i+1, got)
		}
	}
	for n := range 3 {
		if err := f.send(0, mobileOf(t, "DE", n), 10+n, false); err != nil {
			t.Fatalf("cold send %d: %v", n+1, err)
		}
	}
	// Instance 2, room spent: refused by the room, decided without it.
	for i, want := range []int64{3, 2} {
		f.rts[2].Reset()
		if err := f.send(2, mobileOf(t, "GB", 5+i), 20+i, false); err != nil {
			t.Fatalf("warm send %d with the room spent: %v", i+1, err)
		}
		if got := f.rts[2].N(); got != want {
			t.Errorf("warm send %d with the room spent: %d round trips, want %d", i+1, got, want)
		}
	}
	if got := f.room(t); got != 3 {
		t.Errorf("the room: %d, want 3 (full, nothing of the warm sends kept)", got)
	}
	if err := f.send(2, mobileOf(t, "DE", 9), 30, false); problem.CodeOf(err) != problem.CodeUnusualVolume {
		t.Errorf("a cold send with the room spent: %v, want unusual_volume", err)
	}
}

// TestColdRoomRoundTrips: in steady state the room rides in the send's
// round trip: a cold country's send, a warm one's (read before), an
// account send each wait on two (the limits' MULTI, the code).
func TestColdRoomRoundTrips(t *testing.T) {
	f := newColdFleetOn(t, 1, guard.DefaultColdPerHour, guard.DefaultColdPerDay, nil, nil, false)
	f.warmUp(t, "GB", guard.DefaultColdBelow)
	if err := f.send(0, mobileOf(t, "GB", 0), 0, false); err != nil { // instance 0 reads GB warm
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		phone   string
		account bool
	}{
		{"cold country", mobileOf(t, "DE", 1), false},
		{"cold country again", mobileOf(t, "DE", 2), false},
		{"warm country", mobileOf(t, "GB", 1), false},
		{"account send", mobileOf(t, "FR", 1), true},
	} {
		f.rts[0].Reset()
		if err := f.send(0, tc.phone, 1, tc.account); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.rts[0].N(); got != wantDefaultSendRoundTrips {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, wantDefaultSendRoundTrips)
		}
	}
}

// TestColdRoomExactAcrossInstances: concurrent untrusted sends to eight
// countries without history over four instances on one Redis get exactly
// cold_per_hour; mixed with sends to a warm country (from instances with
// no reading of it) and a declared one, the cold ones get at most that,
// the others all go, and the room holds exactly the cold sends that went.
func TestColdRoomExactAcrossInstances(t *testing.T) {
	countries := []string{"DE", "FR", "NG", "ES", "NL", "KE", "BR", "IT"}
	for _, mixed := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold only", true: "with warm and declared"}[mixed], func(t *testing.T) {
			f := newColdFleet(t, 4, 30, 150, func(p *guard.OTPPolicy) { p.CountryVelocity.Expected = map[string]int64{"IN": 60} }, nil)
			if mixed {
				f.warmUp(t, "GB", guard.DefaultColdBelow)
			}
			type job struct {
				phone string
				cold  bool
			}
			var jobs []job
			for n := range 64 {
				jobs = append(jobs, job{mobileOf(t, countries[n%8], n/8), true})
				if mixed && n%4 == 0 {
					jobs = append(jobs, job{mobileOf(t, "GB", n), false}, job{mobileOf(t, "IN", n), false})
				}
			}
			var cold, others atomic.Int64
			var wg sync.WaitGroup
			for i, j := range jobs {
				wg.Go(func() {
					err := f.send(i%4, j.phone, i, false)
					switch code := problem.CodeOf(err); {
					case code == "" && j.cold:
						cold.Add(1)
					case code == "":
						others.Add(1)
					case code != problem.CodeUnusualVolume || !j.cold:
						t.Errorf("send %d (%s): %v", i, j.phone, err)
					}
				})
			}
			wg.Wait()
			if mixed {
				if got, want := others.Load(), int64(len(jobs)-64); got != want {
					t.Errorf("warm and declared sends: %d sent, want all %d", got, want)
				}
				if got := cold.Load(); got > 30 {
					t.Errorf("cold sends: %d, want at most 30", got)
				}
			} else if got := cold.Load(); got != 30 {
				t.Errorf("cold sends: %d, want exactly 30", got)
			}
			if got := f.room(t); got != cold.Load() {
				t.Errorf("the room holds %d, want %d (the cold sends that went)", got, cold.Load())
			}
		})
	}
}
