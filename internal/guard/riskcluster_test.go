package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestRiskOfAServiceOnRedisCluster: on Redis Cluster a named service's
// room is in another slot than the risk cache every service shares, so
// its velocity script cannot read the cache with the count. Its sends
// must still work and be judged as the default service's are: the
// velocity rule's refusal of a high-scored number asks the network once
// and refuses (high_risk_number), a second refusal of it finds the
// answer cached (read in a round trip of its own: no new lookup), and a
// low-scored number goes to the vouched tier. The same with
// otp.risk.countries, which reads the cache with the number's trust mark
// (the service's room too) before the send's limits.
func TestRiskOfAServiceOnRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	if store.Slot("{"+guard.RoomID("GB", overlaySID)+"}") == store.Slot("{GB}") {
		t.Fatal("the service's room shares the cache's slot: pick another service")
	}
	for _, tc := range []struct {
		name      string
		service   string
		countries []string
		lookups   []int64 // after each send: the velocity floor's, the high number's twice, the low one's
	}{
		{"default service", guard.DefaultService, nil, []int64{0, 1, 1, 2}},
		{"named service", overlaySID, nil, []int64{0, 1, 1, 2}},
		{"default service, judged before its limits", guard.DefaultService, []string{"GB"}, []int64{1, 2, 2, 3}},
		{"named service, judged before its limits", overlaySID, []string{"GB"}, []int64{1, 2, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := redistest.ClusterStoreAt(t, c, redistest.Prefix())
			p := guard.DefaultPolicies()
			p.OTP.Cooldown = 0
			v := &p.OTP.CountryVelocity
			v.Floor, v.MinuteShare, v.ColdPerHour = 1, 0, 0
			p.OTP.Risk.Mode, p.OTP.Risk.VouchedFloor, p.OTP.Risk.Countries = guard.RiskOn, 5, tc.countries
			p.Services = []guard.Service{overlayService(overlaySID, nil)}
			p.FillDefaults()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			phones := []string{gb(0), gb(1), gb(1), gb(2)}
			lookup := &countedLookup{scores: map[string]int{gb(1): 95}, def: 10}
			otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Services: p.Services, Counter: st.Counters, Codes: st.Codes,
				Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey, Volumes: st.Velocity, Trusts: st.TrustMarks,
				RiskLookup: lookup, Risks: st.Risks})
			t.Cleanup(otp.Close)
			want := []problem.Code{"", problem.CodeHighRiskNumber, problem.CodeHighRiskNumber, ""}
			for i, phone := range phones {
				_, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone, Service: tc.service,
					ClientIP: fmt.Sprintf("198.51.100.%d", i+1)})
				if got := problem.CodeOf(err); got != want[i] {
					t.Errorf("send %d: %q (%v), want %q", i+1, got, err, want[i])
				}
				if got := lookup.calls.Load(); got != tc.lookups[i] {
					t.Errorf("after send %d: %d lookups, want %d", i+1, got, tc.lookups[i])
				}
			}
			// The answers are the number's, for every service (cached
			// under the country's tag): in the other service's room the
			// low one's send spends the floor, the high one's is refused
			// from the cache.
			for i, phone := range []string{gb(2), gb(1)} {
				_, err := otp.Send(context.Background(), guard.SendRequest{Phone: phone, Service: otherService(tc.service),
					ClientIP: fmt.Sprintf("198.51.101.%d", i+1)})
				if got, want := problem.CodeOf(err), []problem.Code{"", problem.CodeHighRiskNumber}[i]; got != want {
					t.Errorf("%s for the other service: %q (%v), want %q", phone, got, err, want)
				}
			}
			if got, want := lookup.calls.Load(), tc.lookups[len(tc.lookups)-1]; got != want {
				t.Errorf("after the other service's sends: %d lookups, want %d (both answers cached)", got, want)
			}
		})
	}
}

// otherService is the test's other service than service.
func otherService(service string) string {
	if service == guard.DefaultService {
		return overlaySID
	}
	return guard.DefaultService
}

// TestContestedRoomOfAServiceOnRedisCluster: a contested room asks the
// score of the sends it takes in a named service's room on Redis Cluster
// too, where the count cannot read the cache: the next hour's
// high-scored send is refused and its place goes to the next number.
func TestContestedRoomOfAServiceOnRedisCluster(t *testing.T) {
	st, _ := redistest.ClusterStoreAt(t, redistest.SharedCluster(t), redistest.Prefix())
	now := time.Now().Truncate(time.Hour).Add(10 * time.Minute)
	p := guard.DefaultPolicies()
	p.OTP.Cooldown = 0
	v := &p.OTP.CountryVelocity
	v.Floor, v.MinuteShare, v.ColdPerHour = 1, 0, 0
	p.OTP.Risk.Mode = guard.RiskOn
	p.Services = []guard.Service{overlayService(overlaySID, nil)}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	lookup := &countedLookup{scores: map[string]int{gb(1): 95}, def: 50}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Services: p.Services, Counter: st.Counters, Codes: st.Codes,
		Sender: &guardtest.Outbox{}, HMACKey: outageHMACKey, Volumes: st.Velocity, Trusts: st.TrustMarks,
		RiskLookup: lookup, Risks: st.Risks, Now: func() time.Time { return now }})
	t.Cleanup(otp.Close)
	for i, step := range []struct {
		phone   string
		later   time.Duration
		want    problem.Code
		lookups int64
	}{
		{gb(0), 0, "", 0},                                 // the room's one place, unasked
		{gb(3), 0, problem.CodeUnusualVolume, 1},          // refused (mid): the room is contested
		{gb(1), time.Hour, problem.CodeHighRiskNumber, 2}, // taken, asked, refused, given back
		{gb(4), 0, "", 3},                                 // the place given back, asked (mid)
	} {
		now = now.Add(step.later)
		_, err := otp.Send(context.Background(), guard.SendRequest{Phone: step.phone, Service: overlaySID,
			ClientIP: fmt.Sprintf("198.51.102.%d", i+1)})
		if got := problem.CodeOf(err); got != step.want {
			t.Errorf("send %d: %q (%v), want %q", i+1, got, err, step.want)
		}
		if got := lookup.calls.Load(); got != step.lookups {
			t.Errorf("after send %d: %d lookups, want %d", i+1, got, step.lookups)
		}
	}
}
