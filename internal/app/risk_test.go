package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// fakeRisk is a risk lookup answering from a table (the default for a
// number not in it), failing, or slow; it counts the lookups asked.
type fakeRisk struct {
	mu      sync.Mutex
	answers map[string]guard.RiskAnswer
	def     guard.RiskAnswer
	fail    bool
	delay   time.Duration
	calls   atomic.Int64
}

func (f *fakeRisk) LookupRisk(ctx context.Context, e164 string) (guard.RiskAnswer, error) {
	f.calls.Add(1)
	f.mu.Lock()
	a, ok := f.answers[e164]
	if !ok {
		a = f.def
	}
	fail, delay := f.fail, f.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return guard.RiskAnswer{}, ctx.Err()
		}
	}
	if fail {
		return guard.RiskAnswer{}, errors.New("lookup failed")
	}
	return a, nil
}

func (f *fakeRisk) set(fn func(f *fakeRisk)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

const riskOpsKey = "ops-key-0123456789abcdef"

// riskApp is one instance on tg's Redis with otp.risk on and lookup as
// its lookup (nil: none, the Twilio account unset), the policy changed by
// policy; log receives its start-up log.
func riskApp(t *testing.T, tg redistest.Target, lookup guard.RiskLookup, log io.Writer, policy func(p *guard.OTPPolicy), vars ...string) (*app.App, *guardtest.Outbox) {
	t.Helper()
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": sendBenchKey,
		"OTPGUARD_OPS_KEYS": riskOpsKey, "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef",
		"OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_LOG_LEVEL": "warn", "OTPGUARD_REDIS_TIMEOUT": "5s",
	}
	for i := 0; i+1 < len(vars); i += 2 {
		env[vars[i]] = vars[i+1]
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := &cfg.Policies.OTP
	p.CountryVelocity.Floor, p.CountryVelocity.MinuteShare, p.CountryVelocity.UnverifiedFloor = 1, 0, 0
	p.Challenge.MaxNumber = 1000
	p.Risk.Mode, p.Risk.Timeout = guard.RiskOn, 300*time.Millisecond
	if policy != nil {
		policy(p)
	}
	cfg.Policies.FillDefaults()
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatal(err)
	}
	out := &guardtest.Outbox{}
	if log == nil {
		log = io.Discard
	}
	opts := []app.Option{app.WithOutput(log), app.WithSender(out)}
	if lookup != nil {
		opts = append(opts, app.WithRiskLookup(lookup))
	}
	a, err := app.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, out
}

// riskSend posts a send of phone to h and returns the status and the
// problem's code ("" for a 200).
func riskSend(t *testing.T, h http.Handler, phone string) (int, string) {
	t.Helper()
	status, body := riskDo(h, http.MethodPost, "/otp/send", sendBenchKey, `{"phone":"`+phone+`"}`)
	var p struct {
		Code string `json:"code"`
	}
	if status != http.StatusOK {
		_ = json.Unmarshal(body, &p)
	}
	return status, p.Code
}

func riskDo(h http.Handler, method, path, key, body string) (int, []byte) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// gbNumber is the i-th of a run of GB mobile numbers.
func gbNumber(run, i int) string { return fmt.Sprintf("+4474%02d1%05d", run, i) }

// TestRiskDecisions: with the country's velocity floor spent, each
// refused send asks the score once (a cached one is not asked again): a
// high score or a blocked number is 403 high_risk_number, a low one is
// sent (vouched), a mid one, a failed and a slow lookup get the
// challenge; a low score on a line type the policy does not allow is
// refused as the static type would be; an operator's clear makes the
// next refused send ask again.
func TestRiskDecisions(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{answers: map[string]guard.RiskAnswer{}, def: guard.RiskAnswer{Score: 50}}
	a, _ := riskApp(t, tg, f, nil, nil)
	h := a.Handler()
	if status, code := riskSend(t, h, gbNumber(1, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	high, blocked, low, mid, premium := gbNumber(1, 1), gbNumber(1, 2), gbNumber(1, 3), gbNumber(1, 4), gbNumber(1, 5)
	f.set(func(f *fakeRisk) {
		f.answers[high] = guard.RiskAnswer{Score: 91}
		f.answers[blocked] = guard.RiskAnswer{Score: 30, Blocked: true}
		f.answers[low] = guard.RiskAnswer{Score: 5, LineType: "mobile"}
		f.answers[mid] = guard.RiskAnswer{Score: 50}
		f.answers[premium] = guard.RiskAnswer{Score: 5, LineType: "premium"}
	})
	steps := []struct {
		name   string
		phone  string
		status int
		code   string
		calls  int64 // lookups asked by this send
		before func()
	}{
		{name: "high", phone: high, status: http.StatusForbidden, code: "high_risk_number", calls: 1},
		{name: "high, cached", phone: high, status: http.StatusForbidden, code: "high_risk_number"},
		{name: "blocked", phone: blocked, status: http.StatusForbidden, code: "high_risk_number", calls: 1},
		{name: "low: vouched", phone: low, status: http.StatusOK, calls: 1},
		{name: "mid", phone: mid, status: http.StatusPreconditionRequired, code: "challenge_required", calls: 1},
		{name: "mid, cached", phone: mid, status: http.StatusPreconditionRequired, code: "challenge_required"},
		{name: "low on a premium line", phone: premium, status: http.StatusForbidden, code: "number_type_not_allowed", calls: 1},
		{name: "lookup fails", phone: gbNumber(1, 6), status: http.StatusPreconditionRequired, code: "challenge_required", calls: 1,
			before: func() { f.set(func(f *fakeRisk) { f.fail, f.def = true, guard.RiskAnswer{Score: 1} }) }},
		{name: "lookup slow", phone: gbNumber(1, 7), status: http.StatusPreconditionRequired, code: "challenge_required", calls: 1,
			before: func() { f.set(func(f *fakeRisk) { f.fail, f.delay = false, 2*time.Second }) }},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		before := f.calls.Load()
		status, code := riskSend(t, h, st.phone)
		if status != st.status || code != st.code {
			t.Errorf("%s: %d %s, want %d %s", st.name, status, code, st.status, st.code)
		}
		if n := f.calls.Load() - before; n != st.calls {
			t.Errorf("%s: %d lookups, want %d", st.name, n, st.calls)
		}
	}

	// The operator clears the high number's score; the network now says
	// low: its next refused send asks again and is sent.
	f.set(func(f *fakeRisk) { f.delay, f.answers[high] = 0, guard.RiskAnswer{Score: 3} })
	status, body := riskDo(h, http.MethodDelete, "/ops/risk/"+strings.Replace(high, "+", "%2B", 1), riskOpsKey, "")
	if status != http.StatusOK || !bytes.Contains(body, []byte(`"cleared"`)) {
		t.Fatalf("DELETE /ops/risk: %d %s", status, body)
	}
	if status, code := riskSend(t, h, high); status != http.StatusOK {
		t.Errorf("after the clear: %d %s, want 200", status, code)
	}
	status, body = riskDo(h, http.MethodDelete, "/ops/risk/"+strings.Replace(mid, "+", "%2B", 1), sendBenchKey, "")
	if status != http.StatusForbidden {
		t.Errorf("DELETE /ops/risk with an API key: %d %s, want 403", status, body)
	}
}

// TestRiskVouchedCapExact: three instances on one Redis, a low score for
// every number: concurrent refused sends get through the vouched tier
// exactly up to its cap; the rest get the challenge.
func TestRiskVouchedCapExact(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{def: guard.RiskAnswer{Score: 5}}
	const vouched = 5
	var hs []http.Handler
	for range 3 {
		a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Risk.VouchedFloor = vouched })
		hs = append(hs, a.Handler())
	}
	if status, code := riskSend(t, hs[0], gbNumber(2, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	counts := fire(t, hs, 3, 30)
	if counts[http.StatusOK] != vouched || counts[http.StatusPreconditionRequired] != 30-vouched {
		t.Errorf("30 refused sends over 3 instances: %v, want %d sent (the vouched cap) and the rest 428", counts, vouched)
	}
}

// fire sends n numbers of run concurrently, spread over hs, and counts
// the answers by status.
func fire(t *testing.T, hs []http.Handler, run, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			status, _ := riskSend(t, hs[i%len(hs)], gbNumber(run, i+1))
			mu.Lock()
			counts[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return counts
}

// TestRiskNoAnswerNoAllow: a low score is never had without a lookup
// that answered in time and within the budget: with the lookup failing,
// slow, or the budget spent (3 an hour, over three instances, the
// network saying low each time it is asked), concurrent refused sends get
// the challenge and none is sent but the budget's three, each a lookup: a
// failed lookup spends the budget too, and the budget is never exceeded.
func TestRiskNoAnswerNoAllow(t *testing.T) {
	cases := []struct {
		name    string
		fake    func(f *fakeRisk)
		perHour int64
		allows  int
		calls   int64
	}{
		{"lookup fails", func(f *fakeRisk) { f.fail = true }, 200, 0, 20},
		{"lookup slow", func(f *fakeRisk) { f.delay = 2 * time.Second }, 200, 0, 20},
		{"lookup fails, budget spent by failures", func(f *fakeRisk) { f.fail = true }, 3, 0, 3},
		{"over the budget", func(*fakeRisk) {}, 3, 3, 3},
	}
	for run, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := redistest.New(t)
			f := &fakeRisk{def: guard.RiskAnswer{Score: 5}}
			c.fake(f)
			var hs []http.Handler
			for range 3 {
				a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Risk.PerHour = c.perHour })
				hs = append(hs, a.Handler())
			}
			if status, code := riskSend(t, hs[0], gbNumber(10+run, 0)); status != http.StatusOK {
				t.Fatalf("the floor's send: %d %s", status, code)
			}
			counts := fire(t, hs, 10+run, 20)
			if counts[http.StatusOK] != c.allows || counts[http.StatusPreconditionRequired] != 20-c.allows {
				t.Errorf("20 refused sends: %v, want %d sent and the rest 428", counts, c.allows)
			}
			if n := f.calls.Load(); n != c.calls {
				t.Errorf("%d lookups, want %d", n, c.calls)
			}
		})
	}
}

// TestRiskOffWithoutLookup: mode on with no lookup (no Twilio account, no
// WithRiskLookup) is off, and start-up says so once; a refused send gets
// the challenge as without the rule.
func TestRiskOffWithoutLookup(t *testing.T) {
	tg := redistest.New(t)
	var log bytes.Buffer
	a, _ := riskApp(t, tg, nil, &log, nil)
	if n := strings.Count(log.String(), "otp.risk.mode is on but no risk lookup is available"); n != 1 {
		t.Errorf("start-up log has the warning %d times, want 1:\n%s", n, log.String())
	}
	h := a.Handler()
	if status, code := riskSend(t, h, gbNumber(3, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	if status, code := riskSend(t, h, gbNumber(3, 1)); status != http.StatusPreconditionRequired {
		t.Errorf("refused send: %d %s, want 428", status, code)
	}
}

// TestRiskOptInCountries: a send to a country of otp.risk.countries is
// judged before its limits, with the country's velocity floor not spent:
// a high score is refused, a low and a mid one go on to their limits;
// once the floor is spent, a low score's refusal finds it cached and
// sends it in the vouched tier, a mid one's gets the challenge; each
// number is asked once.
func TestRiskOptInCountries(t *testing.T) {
	tg := redistest.New(t)
	high, low, mid := gbNumber(5, 1), gbNumber(5, 2), gbNumber(5, 3)
	f := &fakeRisk{answers: map[string]guard.RiskAnswer{high: {Score: 90}, low: {Score: 2}}, def: guard.RiskAnswer{Score: 50}}
	a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) {
		p.CountryVelocity.Floor, p.Risk.Countries = 3, []string{"GB"}
	})
	h := a.Handler()
	p := func(i int) string { return gbNumber(5, i) }
	steps := []struct {
		name   string
		phone  string
		status int
		calls  int64
	}{
		{"high", high, http.StatusForbidden, 1},
		{"low: its limits", low, http.StatusOK, 1},
		{"mid: its limits", mid, http.StatusOK, 1},
		{"the floor", p(10), http.StatusOK, 1},
		{"low, the floor spent: vouched, the score cached", p(11), http.StatusOK, 1},
		{"mid, the floor spent: the challenge, the score cached", p(12), http.StatusPreconditionRequired, 1},
	}
	f.set(func(f *fakeRisk) { f.answers[p(11)] = guard.RiskAnswer{Score: 1} })
	for _, st := range steps {
		before := f.calls.Load()
		if status, code := riskSend(t, h, st.phone); status != st.status {
			t.Errorf("%s: %d %s, want %d", st.name, status, code, st.status)
		}
		if n := f.calls.Load() - before; n != st.calls {
			t.Errorf("%s: %d lookups, want %d", st.name, n, st.calls)
		}
	}
	// A number of another country is not judged before its limits.
	before := f.calls.Load()
	if status, code := riskSend(t, h, "+2348031234567"); status != http.StatusOK {
		t.Errorf("another country: %d %s, want 200", status, code)
	}
	if n := f.calls.Load() - before; n != 0 {
		t.Errorf("another country: %d lookups, want 0", n)
	}
}
