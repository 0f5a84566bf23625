package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// problemCode returns the code of a problem response, "" for a success.
func problemCode(t testing.TB, r response) string {
	t.Helper()
	if r.Status == http.StatusOK {
		return ""
	}
	var p httpx.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("status %d, body %q is not a problem: %v", r.Status, r.Body, err)
	}
	return p.Code
}

// TestPumpingAttackSimulation: a script requests codes for many distinct
// numbers of one Indian prefix (and a UK premium-rate range), from rotating
// addresses, across three instances, while real users elsewhere sign in.
// Per-number and per-IP limits never fire; the prefix budget and the
// number-type rule do. At most the prefix budget leaves; every legitimate
// code leaves.
func TestPumpingAttackSimulation(t *testing.T) {
	const prefixBudget = 10
	p := defaults()
	p.OTP.PerPrefix = guard.PrefixWindow{Limit: prefixBudget, Window: time.Hour, DigitsDropped: 4}
	c := realCluster(t, 3, p)

	const attack = 300
	attackPrefix := "+91987650" // +9198765 0xxxx minus its last 4 digits
	legit := []string{
		"+14155550100", "+14165550123", "+447400123456", "+447911123456", "+4915112345678",
		"+4917612345678", "+33612345678", "+33698765432", "+5511912345678", "+61412345678",
		"+919812345678", "+919900012345", "+917012345678", "+918123456789", "+34612345678",
	}
	var wg sync.WaitGroup
	var attackRefused, premiumRefused, legitSent atomic.Int64
	codes := sync.Map{}
	for w := range 6 {
		wg.Go(func() {
			for i := w; i < attack; i += 6 {
				ip := fmt.Sprintf("198.51.%d.%d", i/250, i%250+1) // a new address every time
				r := c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":"+9198765%05d","client_ip":%q}`, i, ip))
				if r.Status != http.StatusOK {
					code := problemCode(t, r)
					codes.Store(code, true)
					if code == "prefix_rate_limited" {
						attackRefused.Add(1)
						if r.Header.Get("Retry-After") == "" {
							t.Errorf("prefix_rate_limited without Retry-After")
						}
					}
				}
				// Premium-rate numbers of the UK: refused by their type.
				r = c.do(t, i+1, "POST", "/otp/send", fmt.Sprintf(`{"phone":"+44909879%04d","client_ip":%q}`, i, ip))
				if problemCode(t, r) == "number_type_not_allowed" {
					premiumRefused.Add(1)
				}
			}
		})
	}
	for i, phone := range legit {
		wg.Go(func() {
			r := c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":"203.0.113.%d"}`, phone, i+1))
			if r.Status != http.StatusOK {
				t.Errorf("legitimate send to %s: %d %s", phone, r.Status, r.Body)
				return
			}
			legitSent.Add(1)
		})
	}
	wg.Wait()

	left := c.out.SentTo(attackPrefix)
	premium := c.out.SentTo("+44909")
	t.Logf("attack: %d requests for distinct numbers of %s from %d addresses: %d SMS left (prefix budget %d), %d refused prefix_rate_limited",
		attack, attackPrefix, attack, left, prefixBudget, attackRefused.Load())
	t.Logf("premium-rate: %d requests, %d SMS left, %d refused number_type_not_allowed", attack, premium, premiumRefused.Load())
	t.Logf("legitimate: %d of %d SMS left", legitSent.Load(), len(legit))
	if left > prefixBudget {
		t.Errorf("SMS to the attacked prefix: got %d, want at most %d", left, prefixBudget)
	}
	if left != prefixBudget {
		t.Errorf("SMS to the attacked prefix: got %d, want exactly the budget %d (the limit is exact)", left, prefixBudget)
	}
	if got, want := attackRefused.Load(), int64(attack-prefixBudget); got != want {
		t.Errorf("attack requests refused prefix_rate_limited: got %d, want %d (codes seen: %v)", got, want, keys(&codes))
	}
	if premium != 0 || premiumRefused.Load() != attack {
		t.Errorf("premium-rate: %d SMS left and %d refused, want 0 and %d", premium, premiumRefused.Load(), attack)
	}
	if got := int(legitSent.Load()); got != len(legit) {
		t.Errorf("legitimate SMS: got %d, want all %d", got, len(legit))
	}
}

func keys(m *sync.Map) []string {
	var out []string
	m.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// TestBudgetExactAcrossInstances: concurrent sends to distinct numbers,
// from distinct addresses, across four instances, never exceed the global
// budget, safe-listed numbers included; the rest are 503 budget_exhausted
// with a Retry-After.
func TestBudgetExactAcrossInstances(t *testing.T) {
	const budget = 25
	p := defaults()
	p.OTP.Budget = guard.Budget{PerHour: budget, PerDay: 1000}
	p.OTP.SafeList = []string{"+4474"}
	c := realCluster(t, 4, p)

	const sends = 120
	var wg sync.WaitGroup
	var sent, exhausted atomic.Int64
	for i := range sends {
		wg.Go(func() {
			phone := fmt.Sprintf("+9198%08d", i) // one prefix, far below its limit: only the budget binds
			if i%5 == 0 {
				phone = fmt.Sprintf("+4474001%05d", i) // safe-listed: the budget still applies
			}
			r := c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":"10.%d.%d.1"}`, phone, i/200, i%200))
			switch code := problemCode(t, r); code {
			case "":
				sent.Add(1)
			case "budget_exhausted":
				exhausted.Add(1)
				if r.Status != http.StatusServiceUnavailable {
					t.Errorf("budget_exhausted: status %d, want 503", r.Status)
				}
				if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 3600 {
					t.Errorf("budget_exhausted: Retry-After %q, want 1..3600 seconds", r.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("send %s: %d %s", phone, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	t.Logf("%d concurrent sends over 4 instances, budget %d per hour: %d SMS left, %d refused budget_exhausted",
		sends, budget, c.out.Count(), exhausted.Load())
	if got := c.out.Count(); got != budget || sent.Load() != budget {
		t.Errorf("SMS sent: outbox %d, 200s %d, want exactly %d", got, sent.Load(), budget)
	}
	if got := exhausted.Load(); got != sends-budget {
		t.Errorf("budget_exhausted: got %d, want %d", got, sends-budget)
	}
	// The spent budget stays at exactly its limit (denied hits are refunded).
	v, err := c.instances[0].rdb.Get(context.Background(), c.prefix+"otp:budget:{global}:hour").Int64()
	if err != nil || v != budget {
		t.Errorf("budget counter in Redis: %d (%v), want %d", v, err, budget)
	}
}

// TestBudgetRefundAndOneLog: a send the provider refuses (invalid
// destination) gives its message back; exhaustion is logged once per
// period, not once per refused request, and counted in the metric.
func TestBudgetRefundAndOneLog(t *testing.T) {
	tg := redistest.New(t)
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: tg.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	st := store.NewRedis(rdb, tg.Prefix)
	p := defaults()
	p.OTP.Budget = guard.Budget{PerHour: 3}
	p.FillDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	reg := metrics.New()
	abuse := metrics.NewAbuse(reg)
	out := &guardtest.Outbox{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Counter: st, Codes: st, Sender: out,
		HMACKey: []byte("0123456789abcdef0123456789abcdef"), Logger: log, Abuse: abuse.Hooks()})
	ctx := context.Background()
	send := func(phone string) problem.Code {
		_, err := otp.Send(ctx, guard.SendRequest{Phone: phone})
		return problem.CodeOf(err)
	}

	out.SetFail(problem.Errorf(problem.CodeInvalidDestination, "refused"))
	if got := send("+919800000001"); got != problem.CodeInvalidDestination {
		t.Fatalf("refused send: got %q, want invalid_destination", got)
	}
	// A provider refusal that is not about the number (bad credentials)
	// sent nothing either.
	out.SetFail(&problem.Error{Code: problem.CodeProviderUnavailable, Message: "refused", Err: fmt.Errorf("401 (%w)", guard.ErrNotSent)})
	if got := send("+919800000002"); got != problem.CodeProviderUnavailable {
		t.Fatalf("send the provider refused: got %q, want provider_unavailable", got)
	}
	out.SetFail(nil)
	for i := range 3 { // the refused ones gave their messages back: 3 still leave
		if got := send(fmt.Sprintf("+91980000001%d", i)); got != "" {
			t.Fatalf("send %d: got %q, want sent", i, got)
		}
	}
	for i := range 5 {
		if got := send(fmt.Sprintf("+91980000002%d", i)); got != problem.CodeBudgetExhausted {
			t.Fatalf("send over budget: got %q, want budget_exhausted", got)
		}
	}
	if got := out.Count(); got != 3 {
		t.Errorf("SMS sent: got %d, want 3", got)
	}
	mu.Lock()
	n := strings.Count(logs.String(), "SMS BUDGET EXHAUSTED")
	mu.Unlock()
	if n != 1 {
		t.Errorf("exhaustion error logs: got %d, want 1 for 5 refusals", n)
	}
	if got := metricValue(t, reg, `otpguard_budget_refused_total{window="hour"}`); got != 5 {
		t.Errorf("otpguard_budget_refused_total{window=hour}: got %v, want 5", got)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// metricValue reads one sample from the metrics' registry ("" labels: the
// bare name).
func metricValue(t *testing.T, m *metrics.Set, sample string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			if name == sample {
				if c := mt.GetCounter(); c != nil {
					return c.GetValue()
				}
				return mt.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestDestinationRules: countries and number types refused before any
// counter; per-country velocity; the safe list skips velocity.
func TestDestinationRules(t *testing.T) {
	p := defaults()
	p.OTP.AllowedCountries = []string{"IN", "GB"}
	p.OTP.PerCountry = map[string]guard.Window{"IN": {Limit: 2, Window: time.Hour}}
	p.OTP.SafeList = []string{"+919800000099"}
	c, _ := miniCluster(t, 1, p)
	for _, tc := range []struct {
		name, phone string
		status      int
		code        string
	}{
		{"US not allowed", "+14155550100", 403, "country_not_allowed"},
		{"DE not allowed", "+4915112345678", 403, "country_not_allowed"},
		{"UK premium rate", "+449098790000", 403, "number_type_not_allowed"},
		{"UK toll free", "+448001234567", 403, "number_type_not_allowed"},
		{"UK fixed line", "+442079460000", 403, "number_type_not_allowed"},
		{"UK personal number", "+447012345678", 403, "number_type_not_allowed"},
		{"UK mobile", "+447400123456", 200, ""},
		{"IN mobile 1", "+919800000001", 200, ""},
		{"IN mobile 2", "+919811111112", 200, ""},
		{"IN over its country budget", "+919822222223", 429, "country_rate_limited"},
		{"IN safe-listed skips velocity", "+919800000099", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+tc.phone+`"}`)
			if r.Status != tc.status || problemCode(t, r) != tc.code {
				t.Errorf("send %s: got %d %q, want %d %q", tc.phone, r.Status, problemCode(t, r), tc.status, tc.code)
			}
			if tc.status == 429 && r.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}
	// Refusals by destination spent nothing: the number was never counted.
	if got := c.out.Count(); got != 4 {
		t.Errorf("SMS sent: got %d, want 4", got)
	}
}

// TestNumberTypeDefaultsForNANP: +1 numbers cannot be told apart, so the default
// types let them through, and toll-free ones not.
func TestNumberTypeDefaultsForNANP(t *testing.T) {
	c, _ := miniCluster(t, 1, defaults())
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+14155550100"}`); r.Status != 200 {
		t.Errorf("+1 fixed line or mobile: got %d %s, want 200", r.Status, r.Body)
	}
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+18005550100"}`); problemCode(t, r) != "number_type_not_allowed" {
		t.Errorf("+1 800 toll free: got %d %s, want number_type_not_allowed", r.Status, r.Body)
	}
}
