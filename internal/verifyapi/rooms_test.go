package verifyapi_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// tenantClients are each service's twilio-go client on each instance.
func tenantClients(t *testing.T, x, y *otpguardtest.Server) map[string][2]*verify.ApiService {
	t.Helper()
	rec := &recorder{next: http.DefaultTransport}
	return map[string][2]*verify.ApiService{
		serviceA: {twilioVerify(t, x.URL, keyA, secretA, rec), twilioVerify(t, y.URL, keyA, secretA, rec)},
		serviceB: {twilioVerify(t, x.URL, accountB, secretB, rec), twilioVerify(t, y.URL, accountB, secretB, rec)},
	}
}

// sendAll sends a code of svc to each of phones at once, alternating the
// two instances: how many went out, and the Verify error codes of the
// others.
func sendAll(t *testing.T, c [2]*verify.ApiService, svc string, phones []string) (sent int, refused map[int]int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	refused = map[int]int{}
	for i, phone := range phones {
		wg.Go(func() {
			v, err := c[i%2].CreateVerification(svc, (&verify.CreateVerificationParams{}).SetTo(phone).SetChannel("sms"))
			mu.Lock()
			defer mu.Unlock()
			if err == nil && *v.Status == "pending" {
				sent++
				return
			}
			if err == nil {
				t.Errorf("%s sends to %s: status %q", svc, phone, *v.Status)
				return
			}
			refused[restError(t, svc+" sends to "+phone, err).Code]++
		})
	}
	wg.Wait()
	return sent, refused
}

// TestServiceLimitsCountApart: a number's own limits count each service's
// sends apart. Service A, service B and the default service each fire
// more sends than per_phone allows at one number, all at once over two
// instances sharing one Redis: each gets exactly per_phone, whatever the
// others spent.
func TestServiceLimitsCountApart(t *testing.T) {
	pol := twoTenants(t, guard.DefaultPolicies())
	pol.OTP.Cooldown = 0
	pol.OTP.PerPhone = guard.Window{Limit: 2, Window: time.Hour}
	pol.OTP.PerIP = guard.Window{Limit: 1000, Window: time.Hour}
	x, y := startSharedPair(t, pol)
	clients := tenantClients(t, x, y)
	const phone, tries = "+14155550142", 6
	phones := make([]string, tries)
	for i := range phones {
		phones[i] = phone
	}
	var wg sync.WaitGroup
	got := map[string]int{}
	var mu sync.Mutex
	for _, svc := range []string{serviceA, serviceB} {
		wg.Go(func() {
			sent, refused := sendAll(t, clients[svc], svc, phones)
			mu.Lock()
			got[svc] = sent
			mu.Unlock()
			if refused[60203] != tries-sent {
				t.Errorf("%s: refused %v, want %d of 60203 (max send attempts)", svc, refused, tries-sent)
			}
		})
	}
	for i := range tries {
		wg.Go(func() {
			status, v, err := apiJSON([]string{x.URL, y.URL}[i%2], "/otp/send", map[string]any{"phone": phone, "client_ip": "203.0.113.7"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && status == http.StatusOK:
				got[guard.DefaultService]++
			case err != nil || v["code"] != "phone_rate_limited":
				t.Errorf("the default service sends: %d %v %v, want 200 or phone_rate_limited", status, v, err)
			}
		})
	}
	wg.Wait()
	for _, svc := range []string{serviceA, serviceB, guard.DefaultService} {
		if got[svc] != int(pol.OTP.PerPhone.Limit) {
			t.Errorf("service %q: %d sends went out, want exactly per_phone %d", svc, got[svc], pol.OTP.PerPhone.Limit)
		}
	}
}

// TestNoisyNeighbour: an attack on service A's users in a country (a
// spray of new numbers, none verified) spends A's automatic rules there
// (its velocity room, unverified budget, cold room, carrier shares) and
// not B's: B's users of that country then get exactly what they get on a
// deployment A never touched. Each figure comes from two instances
// sharing one Redis.
func TestNoisyNeighbour(t *testing.T) {
	pol := twoTenants(t, guard.DefaultPolicies())
	pol.OTP.PerIP = guard.Window{Limit: 1000, Window: time.Hour}
	pol.OTP.CountryVelocity.Floor, pol.OTP.CountryVelocity.MinuteShare = 4, 0
	numbers := func(from, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("+234803%07d", from+i) // NG, MTN's range
		}
		return out
	}
	users := numbers(5000, 6)

	// B's users alone, on a deployment of their own.
	x0, y0 := startSharedPair(t, pol)
	alone, aloneRefused := sendAll(t, tenantClients(t, x0, y0)[serviceB], serviceB, users)
	if alone == 0 || alone == len(users) {
		t.Fatalf("B alone: %d of %d sent (refused %v); the test wants the rules to bite within B's users", alone, len(users), aloneRefused)
	}

	// The same after A's attack on the same country.
	x, y := startSharedPair(t, pol)
	clients := tenantClients(t, x, y)
	attack, attackRefused := sendAll(t, clients[serviceA], serviceA, numbers(0, 40))
	if attack >= 40 || len(attackRefused) == 0 {
		t.Fatalf("A's attack: %d of 40 sent, refused %v; want the automatic rules to refuse it", attack, attackRefused)
	}
	after, afterRefused := sendAll(t, clients[serviceB], serviceB, users)
	if after != alone {
		t.Errorf("B's users after A's attack: %d of %d sent (refused %v), alone %d (refused %v): A's attack spent B's room",
			after, len(users), afterRefused, alone, aloneRefused)
	}
	// The default service's users are B's neighbours too.
	var deflt int
	for _, phone := range users {
		status, v, err := apiJSON(x.URL, "/otp/send", map[string]any{"phone": phone, "client_ip": "203.0.113.7"})
		if err == nil && status == http.StatusOK {
			deflt++
		} else if err != nil {
			t.Errorf("the default service sends to %s: %v %v", phone, v, err)
		}
	}
	if deflt != alone {
		t.Errorf("the default service's users after A's attack: %d of %d sent, want %d as B alone", deflt, len(users), alone)
	}
}
