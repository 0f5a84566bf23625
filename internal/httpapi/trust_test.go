package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// trustWorld is two instances on one real Redis with a driven clock, the
// velocity rule's floor at 5 new numbers and the trusted tier's at 10 an
// hour per country, and no cooldown (a fixed window expires in real time,
// whatever the clock says).
func trustWorld(t *testing.T) (*opsCluster, *fakeClock) {
	t.Helper()
	clock := &fakeClock{}
	clock.Set(time.Now().UTC().Truncate(time.Hour))
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Floor = 5
	p.OTP.CountryVelocity.MinuteShare = 0
	p.OTP.Trust.Floor = 10
	return newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EngineSQLite, policies: &p,
		opts: []app.Option{app.WithClock(clock.Now)}}), clock
}

// trustSend asks instance i for a code; it returns the problem code, ""
// when sent.
func trustSend(t *testing.T, oc *opsCluster, i int, phone string, account bool) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"phone": phone, "account": account, "client_ip": fmt.Sprintf("10.9.%d.%d", len(phone), i)})
	r := oc.do(t, i, "POST", "/otp/send", string(body))
	if r.Status == http.StatusOK {
		return ""
	}
	return problemCode(t, r)
}

// gbMobile is the n-th of a run of valid GB mobiles (not the Channel
// Islands' or Man's, which share +44 7), spread over prefixes.
func gbMobile(n int) string {
	for k := n; ; k += 1000 {
		s := fmt.Sprintf("+4474%02d%06d", 10+k%90, 100000+k*7919%900000)
		if p, err := guard.ParsePhone(s, ""); err == nil && p.Region == "GB" && p.Type() == "mobile" {
			return s
		}
	}
}

// TestTrustedNumberSentWhileCountryRefuses: a number that verified a code
// yesterday (on the other instance) is sent a code while its country
// refuses new numbers (unusual_volume), and so are an imported number and
// one the app vouches for (account: true); a new number is not.
func TestTrustedNumberSentWhileCountryRefuses(t *testing.T) {
	oc, clock := trustWorld(t)
	returning := "+447400123456"
	if code := trustSend(t, oc, 0, returning, false); code != "" {
		t.Fatalf("first send: %s", code)
	}
	r := oc.do(t, 1, "POST", "/otp/verify", `{"phone":"`+returning+`","code":"`+oc.out.LastCode(t, returning)+`"}`)
	if r.Status != http.StatusOK {
		t.Fatalf("verify: %d %s", r.Status, r.Body)
	}
	imported := "+447400123999"
	if r := oc.ops(t, 1, "POST", "/ops/trusted-numbers", `{"numbers":["`+imported+`"]}`); r.Status != http.StatusOK {
		t.Fatalf("import: %d %s", r.Status, r.Body)
	}
	clock.Add(24 * time.Hour) // the next day
	refused := 0
	for n := 0; n < 40 && refused == 0; n++ {
		if code := trustSend(t, oc, n%2, gbMobile(n), false); code == "unusual_volume" {
			refused++
		} else if code != "" {
			t.Fatalf("new number %d: %s, want sent or unusual_volume", n, code)
		}
	}
	if refused == 0 {
		t.Fatal("the country never refused a new number")
	}
	cases := []struct {
		name    string
		phone   string
		account bool
		want    string
	}{
		{"verified yesterday", returning, false, ""},
		{"imported", imported, false, ""},
		{"the app's account", "+447400120001", true, ""},
		{"new", "+447400120002", false, "unusual_volume"},
	}
	for i, tc := range cases {
		if got := trustSend(t, oc, i%2, tc.phone, tc.account); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	// The desk shows the trusted sends per country, and while the velocity
	// alert is active its badge does not say normal.
	opsWait(t, "GB's three trusted sends on the desk", func() bool {
		r := oc.ops(t, 0, "GET", "/ops/abuse", "")
		var v struct {
			LastHour struct {
				Countries []struct {
					Country      string `json:"country"`
					TrustedSends int64  `json:"trusted_sends"`
					Challenged   *int64 `json:"challenged"`
				} `json:"countries"`
			} `json:"last_hour"`
		}
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &v) != nil {
			return false
		}
		for _, c := range v.LastHour.Countries {
			if c.Country == "GB" && c.TrustedSends == 3 && c.Challenged != nil {
				return true
			}
		}
		return false
	})
	page := oc.ops(t, 1, "GET", "/ops", "")
	if body := string(page.Body); !strings.Contains(body, `id="status-badge" data-code="alert"`) || strings.Contains(body, "all systems normal") {
		t.Errorf("GET /ops while GB's velocity alert is active: the badge is not the alert's")
	}
}

// TestTrustedTierCapExact: 30 concurrent sends to trusted numbers of one
// country over two instances: exactly the trusted tier's floor (10) go
// out, the rest are unusual_volume; the new tier's count is untouched, so
// new numbers still get their 5.
func TestTrustedTierCapExact(t *testing.T) {
	oc, _ := trustWorld(t)
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for n := range 30 {
		wg.Go(func() {
			code := trustSend(t, oc, n%2, gbMobile(n), true)
			mu.Lock()
			got[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if got[""] != 10 || got["unusual_volume"] != 20 {
		t.Errorf("trusted sends: %v, want 10 sent and 20 unusual_volume", got)
	}
	sent := 0
	for n := 100; n < 110; n++ {
		if trustSend(t, oc, n%2, gbMobile(n), false) == "" {
			sent++
		}
	}
	if sent != 5 {
		t.Errorf("new numbers after the trusted tier filled: %d sent, want the floor 5", sent)
	}
}

// TestAccountVerifyGrowsTrustedTier: an app that flags its users with
// account: true and never imports them: their codes' verifies (on the
// other instance) are credited to the trusted tier, where the sends
// counted, so the next hour its cap is factor 3 x the 10 verified, not the
// floor of 10.
func TestAccountVerifyGrowsTrustedTier(t *testing.T) {
	oc, clock := trustWorld(t)
	send := func(n int) string {
		t.Helper()
		body := fmt.Sprintf(`{"phone":%q,"account":true,"client_ip":"10.8.0.%d"}`, gbMobile(n), n)
		r := oc.do(t, n%2, "POST", "/otp/send", body)
		if r.Status == http.StatusOK {
			return ""
		}
		return problemCode(t, r)
	}
	for n := range 10 {
		if code := send(n); code != "" {
			t.Fatalf("account send %d: %s", n, code)
		}
		phone := gbMobile(n)
		r := oc.do(t, (n+1)%2, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`)
		if r.Status != http.StatusOK {
			t.Fatalf("verify %d: %d %s", n, r.Status, r.Body)
		}
	}
	clock.Add(time.Hour)
	got := map[string]int{}
	for n := 100; n < 131; n++ {
		got[send(n)]++
	}
	if got[""] != 30 || got["unusual_volume"] != 1 {
		t.Errorf("the next hour's account sends: %v, want 30 sent and 1 unusual_volume", got)
	}
}

// TestTrustedNumbersImport: the import's validation and idempotency.
func TestTrustedNumbersImport(t *testing.T) {
	oc, _ := trustWorld(t)
	many, _ := json.Marshal(map[string][]string{"numbers": make([]string, guard.MaxTrustImport+1)})
	copies := make([]string, guard.MaxTrustImport)
	for i := range copies {
		copies[i] = "+447400123459"
	}
	same, _ := json.Marshal(map[string][]string{"numbers": copies})
	cases := []struct {
		name, body string
		status     int
		want       string // the answer's body, or the problem code
	}{
		{"valid and invalid", `{"numbers":["+447400123456","447400123457","+4479","+919812345678"," +447400123458"]}`, 200,
			`{"imported":2,"invalid":3,"invalid_indexes":[1,2,4]}`},
		{"again: idempotent", `{"numbers":["+447400123456","447400123457","+4479","+919812345678"," +447400123458"]}`, 200,
			`{"imported":2,"invalid":3,"invalid_indexes":[1,2,4]}`},
		{"empty", `{"numbers":[]}`, 200, `{"imported":0,"invalid":0,"invalid_indexes":[]}`},
		{"one number many times: counted once", string(same), 200, `{"imported":1,"invalid":0,"invalid_indexes":[]}`},
		{"duplicates beside others", `{"numbers":["+447400123460","+447400123460","x","+447400123461"]}`, 200,
			`{"imported":2,"invalid":1,"invalid_indexes":[2]}`},
		{"no numbers", `{}`, 400, "invalid_request"},
		{"not a list", `{"numbers":"+447400123456"}`, 400, "invalid_request"},
		{"too many", string(many), 400, "invalid_request"},
	}
	for i, tc := range cases {
		r := oc.ops(t, i%2, "POST", "/ops/trusted-numbers", tc.body)
		if r.Status != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, r.Status, r.Body, tc.status)
		}
		if tc.status == 200 {
			if got := string(r.Body); got != tc.want+"\n" && got != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, r.Body, tc.want)
			}
		} else if got := problemCode(t, r); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if r := oc.do(t, 0, "POST", "/ops/trusted-numbers", `{"numbers":[]}`); r.Status != http.StatusForbidden {
		t.Errorf("with an API key: %d, want 403", r.Status)
	}
	// The audit trail names counts, never a number.
	opsWait(t, "the import in the audit trail", func() bool {
		r := oc.ops(t, 0, "GET", "/ops/events?action=otp.trust.import", "")
		return r.Status == 200 && json.Valid(r.Body) && containsAll(string(r.Body), "imported=2 invalid=3", "imported=1 invalid=0") &&
			!containsAll(string(r.Body), "447400123456")
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestTrustOffRefusesImports holds what docs/reference.md says of
// otp.trust.verified_within: 0: trusted numbers are off, so an import,
// whose marks nothing would read, is refused with 400 invalid_request.
func TestTrustOffRefusesImports(t *testing.T) {
	p := defaults()
	p.OTP.Trust.VerifiedWithin = 0
	oc := newOpsCluster(t, opsConfig{instances: 1, engine: sqlstore.EngineSQLite, policies: &p})
	r := oc.ops(t, 0, "POST", "/ops/trusted-numbers", `{"numbers":["+447400123456"]}`)
	if got := problemCode(t, r); r.Status != http.StatusBadRequest || got != "invalid_request" {
		t.Errorf("import with verified_within 0: %d %s, want 400 invalid_request", r.Status, r.Body)
	}
}
