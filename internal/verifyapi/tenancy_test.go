package verifyapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	verify "github.com/twilio/twilio-go/rest/verify/v2"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/otpguardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// startSharedPair boots two otpguard instances with pol on one Redis and
// one key prefix, as two servers of one deployment behind a load
// balancer.
func startSharedPair(t *testing.T, pol guard.Policies) (x, y *otpguardtest.Server) {
	t.Helper()
	rt := redistest.New(t)
	shared := func(c *config.Config) { c.RedisURL, c.RedisPrefix = rt.URL, rt.Prefix }
	return otpguardtest.StartWith(t, pol, shared), otpguardtest.StartWith(t, pol, shared)
}

// apiJSON posts body to path with the API key, safe to call from any
// goroutine: the status and the decoded answer.
func apiJSON(base, path string, body any) (int, map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+otpguardtest.APIKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		return res.StatusCode, nil, fmt.Errorf("%s: not JSON: %w", path, err)
	}
	return res.StatusCode, v, nil
}

// The texts tell whose SMS is whose: each service sends in its own
// locale (the built-in texts of locale.go).
var localeOf = map[string]string{serviceA: "fr", serviceB: "de", guard.DefaultService: "es"}

var textStart = map[string]string{"fr": "Votre", "de": "Ihr", "es": "Tu"}

// codesOf finds, in both outboxes, the one SMS of each service to phone.
func codesOf(t *testing.T, phone string, boxes ...*otpguardtest.Outbox) map[string]string {
	t.Helper()
	codes := map[string]string{}
	for _, o := range boxes {
		for _, m := range o.Sent() {
			if m.To != phone {
				continue
			}
			for svc, loc := range localeOf {
				if strings.HasPrefix(m.Body, textStart[loc]) {
					if _, twice := codes[svc]; twice {
						t.Errorf("%s: two SMS of service %q", phone, svc)
					}
					codes[svc] = codeIn.FindString(m.Body)
				}
			}
		}
	}
	if len(codes) != len(localeOf) {
		t.Fatalf("%s: the SMS of %d services, want %d: %v", phone, len(codes), len(localeOf), codes)
	}
	return codes
}

// TestOneLiveCodePerService: services A and B and the default service send
// to the same numbers at once, over two instances sharing one Redis. Every
// code stays live beside the others (no send supersedes another service's
// code); a check of one service with another's code is a wrong code of its
// own (pending, not valid) while it has one, and Verify's 404 once it has
// none; each code verifies on its own service only. A service's spent
// guesses lock its own code only.
func TestOneLiveCodePerService(t *testing.T) {
	pol := twoTenants(t, guard.DefaultPolicies())
	// Each service has its own send limits of a number (rooms_test.go);
	// wide here, so that nothing but the codes is under test.
	pol.OTP.Cooldown = 0
	pol.OTP.PerPhone = guard.Window{Limit: 100, Window: time.Hour}
	pol.OTP.PerIP = guard.Window{Limit: 1000, Window: time.Hour}
	x, y := startSharedPair(t, pol)
	rec := &recorder{next: http.DefaultTransport}
	// A's client on x, B's on y, and each also on the other instance.
	clients := map[string][2]*verify.ApiService{
		serviceA: {twilioVerify(t, x.URL, keyA, secretA, rec), twilioVerify(t, y.URL, keyA, secretA, rec)},
		serviceB: {twilioVerify(t, y.URL, accountB, secretB, rec), twilioVerify(t, x.URL, accountB, secretB, rec)},
	}
	const numbers = 4
	phones := make([]string, numbers)
	for i := range phones {
		phones[i] = fmt.Sprintf("+1415555019%d", i)
	}

	// Phase 1: every service sends to every number, all at once.
	var mu sync.Mutex
	sids := map[string]string{} // service + phone -> verification SID
	var wg sync.WaitGroup
	for i, phone := range phones {
		for _, svc := range []string{serviceA, serviceB} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := clients[svc][0].CreateVerification(svc,
					(&verify.CreateVerificationParams{}).SetTo(phone).SetChannel("sms").SetLocale(localeOf[svc]))
				if err != nil || *v.Status != "pending" {
					t.Errorf("%s sends to %s: %v", svc, phone, err)
					return
				}
				mu.Lock()
				sids[svc+phone] = *v.Sid
				mu.Unlock()
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := []string{x.URL, y.URL}[i%2]
			status, v, err := apiJSON(base, "/otp/send", map[string]any{"phone": phone,
				"client_ip": "203.0.113.7", "locale": localeOf[guard.DefaultService]})
			if err != nil || status != http.StatusOK {
				t.Errorf("the default service sends to %s: %d %v %v", phone, status, v, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	codes := make([]map[string]string, numbers)
	for i, phone := range phones {
		codes[i] = codesOf(t, phone, x.Outbox, y.Outbox)
	}

	// Phase 2, at once: each service checks another's code, on the other
	// instance. It has a pending code of its own, so that is a wrong
	// guess of its own: pending, not valid (Verify's answer).
	for i, phone := range phones {
		c := codes[i]
		for svc, other := range map[string]string{serviceA: serviceB, serviceB: guard.DefaultService} {
			if c[svc] == c[other] { // one in a million: the other's code is this one's too
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				chk, err := clients[svc][1].CreateVerificationCheck(svc,
					(&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(c[other]))
				if err != nil || *chk.Status != "pending" || *chk.Valid || *chk.Sid != sids[svc+phone] {
					t.Errorf("%s checks %q's code for %s: %+v, %v; want its own verification pending, not valid", svc, other, phone, chk, err)
				}
			}()
		}
		if c[guard.DefaultService] != c[serviceA] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := []string{y.URL, x.URL}[i%2]
				status, v, err := apiJSON(base, "/otp/verify", map[string]any{"phone": phone, "code": c[serviceA]})
				if err != nil || status != http.StatusBadRequest || v["code"] != "wrong_code" {
					t.Errorf("the default service checks A's code for %s: %d %v %v; want 400 wrong_code", phone, status, v, err)
				}
			}()
		}
	}
	wg.Wait()

	// B spends its guesses on the first number: its code is locked, A's
	// and the default's are not.
	lockedPhone := phones[0]
	wrong := "000000"
	for _, c := range codes[0] {
		if c == wrong {
			wrong = "111111" // two codes of 000000 and 111111 both: one in 10^12
		}
	}
	for try := 0; ; try++ {
		_, err := clients[serviceB][0].CreateVerificationCheck(serviceB,
			(&verify.CreateVerificationCheckParams{}).SetTo(lockedPhone).SetCode(wrong))
		if err != nil {
			if re := restError(t, "B's guesses", err); re.Code != 60202 {
				t.Fatalf("B's guess %d: %+v, want 60202 once the guesses are spent", try, re)
			}
			break
		}
		if try > pol.OTP.MaxVerifyAttempts {
			t.Fatalf("B's guesses never locked its code")
		}
	}

	// Phase 3, at once: each code verifies on its own service.
	for i, phone := range phones {
		c := codes[i]
		for _, svc := range []string{serviceA, serviceB} {
			if svc == serviceB && phone == lockedPhone {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				chk, err := clients[svc][1].CreateVerificationCheck(svc,
					(&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(c[svc]))
				if err != nil || *chk.Status != "approved" || !*chk.Valid || *chk.Sid != sids[svc+phone] {
					t.Errorf("%s checks its code for %s: %+v, %v; want approved", svc, phone, chk, err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, v, err := apiJSON(x.URL, "/otp/verify", map[string]any{"phone": phone, "code": c[guard.DefaultService]})
			if err != nil || status != http.StatusOK || v["status"] != "approved" {
				t.Errorf("the default service checks its code for %s: %d %v %v; want approved", phone, status, v, err)
			}
		}()
	}
	wg.Wait()

	// Phase 4: no service has a pending code left but B on the locked
	// number: another's code is Verify's 404, and B's locked code stays
	// locked.
	for i, phone := range phones {
		_, err := clients[serviceA][0].CreateVerificationCheck(serviceA,
			(&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(codes[i][serviceB]))
		if re := restError(t, "A after its approval", err); re.Code != 20404 || re.Status != http.StatusNotFound {
			t.Errorf("A checks B's code for %s after its own approval: %+v, want 404 20404", phone, re)
		}
		if phone == lockedPhone {
			_, err := clients[serviceB][1].CreateVerificationCheck(serviceB,
				(&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(codes[i][serviceB]))
			if re := restError(t, "B's locked code", err); re.Code != 60202 {
				t.Errorf("B's right code after its lock: %+v, want 60202", re)
			}
			continue
		}
		_, err = clients[serviceB][0].CreateVerificationCheck(serviceB,
			(&verify.CreateVerificationCheckParams{}).SetTo(phone).SetCode(codes[i][serviceA]))
		if re := restError(t, "B after its approval", err); re.Code != 20404 {
			t.Errorf("B checks A's code for %s after its own approval: %+v, want 404 20404", phone, re)
		}
	}
	for svc, cl := range clients {
		for _, phone := range phones {
			want := "approved"
			if svc == serviceB && phone == lockedPhone {
				want = "max_attempts_reached"
			}
			if v, err := cl[0].FetchVerification(svc, sids[svc+phone]); err != nil || *v.Status != want {
				t.Errorf("%s's verification for %s: %+v, %v; want %s", svc, phone, v, err, want)
			}
		}
	}

	// Phase 5: the desk's number search shows each service's code, B's
	// locked; its unblock clears B's code, and with it the lock.
	serviceCodes := func() map[string]any {
		t.Helper()
		var n struct {
			ServiceCodes []struct {
				Service string         `json:"service"`
				HasCode *bool          `json:"has_code"`
				Code    map[string]any `json:"code"`
			} `json:"service_codes"`
		}
		opsCall(t, x.URL, http.MethodGet, "/ops/numbers/"+url.PathEscape(lockedPhone), &n)
		out := map[string]any{}
		for _, sc := range n.ServiceCodes {
			if sc.HasCode == nil {
				t.Fatalf("the desk could not read %s's code", sc.Service)
			}
			out[sc.Service] = *sc.HasCode
			if sc.Code != nil {
				out[sc.Service] = sc.Code["locked"]
			}
		}
		return out
	}
	if got, want := serviceCodes(), map[string]any{serviceA: false, serviceB: true}; !maps.Equal(got, want) {
		t.Errorf("the desk's codes of %s (locked, or has a code): %v, want %v", lockedPhone, got, want)
	}
	opsCall(t, y.URL, http.MethodDelete, "/ops/blocked/"+url.PathEscape(lockedPhone), nil)
	if got, want := serviceCodes(), map[string]any{serviceA: false, serviceB: false}; !maps.Equal(got, want) {
		t.Errorf("the desk's codes of %s after its unblock: %v, want %v", lockedPhone, got, want)
	}
}

// opsCall calls an ops route with the ops key and decodes its JSON answer
// into out (nil: none read); anything but a 2xx fails the test.
func opsCall(t *testing.T, base, method, path string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+otpguardtest.OpsKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}
