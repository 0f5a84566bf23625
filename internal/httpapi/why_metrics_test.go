package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// scrape reads instance i's /metrics.
func scrape(t *testing.T, c *cluster, i int) map[string]*dto.MetricFamily {
	t.Helper()
	r := c.doKey(t, i, "GET", "/metrics", "", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", r.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample is the value of the series of family name with exactly labels (a
// histogram's sample count); ok false when there is no such series.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func wantSample(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := sample(fams, name, labels...)
	switch {
	case !ok:
		t.Errorf("%s%v: no such series, want %v", name, labels, want)
	case got != want:
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// whyPolicies: a limit policy, the countries served, a spend budget.
func whyPolicies() guard.Policies {
	p := defaults()
	p.OTP.AllowedCountries = []string{"IN", "GB"}
	p.OTP.Budget = guard.Budget{PerHour: 10}
	p.Limits = map[string]limit.Policy{
		"api": {Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 0.1},
	}
	return p
}

// TestMetricsFromStart: the series alert rules read exist at zero before
// the first event, and then count what happened, by route and status, by
// country, by provider outcome; the budget gauge reads the shared store.
func TestMetricsFromStart(t *testing.T) {
	c, _ := miniCluster(t, 1, whyPolicies())
	fams := scrape(t, c, 0)
	for _, s := range [][]string{
		{"otpguard_decisions_total", "policy", "otp_send", "outcome", "budget_exhausted", "service", "default"},
		{"otpguard_decisions_total", "policy", "otp_send", "outcome", "allowed", "service", "default"},
		{"otpguard_decisions_total", "policy", "otp_verify", "outcome", "too_many_attempts", "service", "default"},
		{"otpguard_decisions_total", "policy", "api", "outcome", "rate_limited", "service", ""},
		{"otpguard_decisions_from_memory_total", "policy", "api"},
		{"otpguard_budget_refused_total", "window", "hour"},
		{"otpguard_conversion_alerts_total", "scope", "prefix", "action", "blocked"},
		{"otpguard_velocity_alerts_total", "country", "GB"},
		{"otpguard_sms_sent_by_country_total", "country", "IN"},
		{"otpguard_sms_sent_by_country_total", "country", "other"},
		{"otpguard_sms_total", "result", "failed"},
		{"otpguard_sms_status_total", "status", "undelivered", "channel", "sms"},
		{"otpguard_shed_total", "route", "/otp/send"},
		{"otpguard_http_requests_total", "method", "POST", "route", "/otp/send", "status", "429"},
		{"otpguard_http_request_duration_seconds", "method", "POST", "route", "/limits/check", "status", "503"},
		{"otpguard_sms_provider_duration_seconds", "provider", "custom", "channel", "sms", "outcome", "timeout"},
		{"otpguard_sms_budget_used", "window", "hour"},
	} {
		wantSample(t, fams, 0, s[0], s[1:]...)
	}
	wantSample(t, fams, 10, "otpguard_sms_budget_limit", "window", "hour")
	if _, ok := sample(fams, "otpguard_sms_budget_limit", "window", "day"); ok {
		t.Errorf("otpguard_sms_budget_limit{window=day}: present, want absent (the day's budget is off)")
	}
	bi := fams["otpguard_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("otpguard_build_info: %v, want one series at 1", bi)
	}
	labels := map[string]string{}
	for _, l := range bi.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["goversion"] != runtime.Version() || labels["version"] == "" || labels["revision"] == "" {
		t.Errorf("otpguard_build_info labels %v, want goversion %s and a version and revision", labels, runtime.Version())
	}

	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != 200 {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != 429 {
		t.Fatalf("second send: %d %s, want 429 cooldown", r.Status, r.Body)
	}
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+8613800138000"}`); r.Status != 403 {
		t.Fatalf("send to CN: %d %s, want 403 country_not_allowed", r.Status, r.Body)
	}
	if r := c.do(t, 0, "GET", "/no/such/route", ""); r.Status != 404 {
		t.Fatalf("unknown route: %d", r.Status)
	}
	if r := c.do(t, 0, "DELETE", "/ops/blocked/"+pathPhone(phone), ""); r.Status != 403 {
		t.Fatalf("ops route with an API key: %d, want 403", r.Status)
	}

	fams = scrape(t, c, 0)
	wantSample(t, fams, 1, "otpguard_http_requests_total", "method", "POST", "route", "/otp/send", "status", "200")
	wantSample(t, fams, 1, "otpguard_http_requests_total", "method", "POST", "route", "/otp/send", "status", "429")
	wantSample(t, fams, 1, "otpguard_http_requests_total", "method", "POST", "route", "/otp/send", "status", "403")
	wantSample(t, fams, 1, "otpguard_http_request_duration_seconds", "method", "POST", "route", "/otp/send", "status", "200")
	wantSample(t, fams, 1, "otpguard_http_requests_total", "method", "other", "route", "unmatched", "status", "404")
	// The route's template, never the number in the path.
	wantSample(t, fams, 1, "otpguard_http_requests_total", "method", "DELETE", "route", "/ops/blocked/:phone", "status", "403")
	wantSample(t, fams, 1, "otpguard_sms_sent_by_country_total", "country", "IN")
	wantSample(t, fams, 0, "otpguard_sms_sent_by_country_total", "country", "GB")
	wantSample(t, fams, 1, "otpguard_sms_provider_duration_seconds", "provider", "custom", "channel", "sms", "outcome", "sent")
	wantSample(t, fams, 1, "otpguard_decisions_total", "policy", "otp_send", "outcome", "cooldown", "service", "default")
	wantSample(t, fams, 1, "otpguard_decisions_total", "policy", "otp_send", "outcome", "country_not_allowed", "service", "default")
	// One send left: the budget counted it (the refusals came before it).
	wantSample(t, fams, 1, "otpguard_sms_budget_used", "window", "hour")
	if v, ok := sample(fams, "otpguard_sms_budget_reset_seconds", "window", "hour"); !ok || v <= 0 || v > 3600 {
		t.Errorf("otpguard_sms_budget_reset_seconds{hour} = %v (%v), want in (0, 3600]", v, ok)
	}
	// The scrapes themselves are counted too, on their own route.
	if v, _ := sample(fams, "otpguard_http_requests_total", "method", "GET", "route", "/metrics", "status", "200"); v < 1 {
		t.Errorf("GET /metrics counted %v times, want at least 1", v)
	}
}

// TestBudgetGaugeWhileRedisIsDown: a scrape while the store does not
// answer still reports the limit, and leaves the figure it cannot read out
// instead of reporting a guess.
func TestBudgetGaugeWhileRedisIsDown(t *testing.T) {
	c, m := miniCluster(t, 1, whyPolicies())
	m.Close()
	fams := scrape(t, c, 0)
	wantSample(t, fams, 10, "otpguard_sms_budget_limit", "window", "hour")
	if v, ok := sample(fams, "otpguard_sms_budget_used", "window", "hour"); ok {
		t.Errorf("otpguard_sms_budget_used{hour} = %v with Redis down, want absent", v)
	}
}

// syncBuffer collects a log written by many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// bytes is a copy of what was logged so far.
func (s *syncBuffer) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// lines are the JSON lines logged so far with msg "request".
func (s *syncBuffer) requestLines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// loggedInstance starts one instance on a miniredis logging at level to a
// buffer, its configuration changed by tune.
func loggedInstance(t *testing.T, level string, p guard.Policies, tune ...func(*config.Config)) (*cluster, *syncBuffer) {
	t.Helper()
	m := miniredis.RunT(t)
	cfg := testConfig(t, "redis://"+m.Addr(), redistest.Prefix(), t.TempDir(), p)
	cfg.LogLevel = level
	for _, f := range tune {
		f(cfg)
	}
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	logs := &syncBuffer{}
	c := &cluster{out: &guardtest.Outbox{}, prefix: cfg.RedisPrefix, url: cfg.RedisURL}
	c.instances = append(c.instances, startInstance(t, cfg, c.out, app.WithRedis(rdb), app.WithOutput(logs)))
	return c, logs
}

// TestRequestLogLine: the line of a refusal names its code and the masked
// number, latency in milliseconds as a float, and the request ID the
// caller got; probes and scrapes log nothing at INFO.
func TestRequestLogLine(t *testing.T) {
	c, logs := loggedInstance(t, "info", whyPolicies())
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if r := c.doKey(t, 0, "GET", path, "", ""); r.Status != 200 {
			t.Fatalf("GET %s: %d", path, r.Status)
		}
	}
	sent := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
	refused := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
	if sent.Status != 200 || refused.Status != 429 {
		t.Fatalf("sends: %d, %d; want 200, 429", sent.Status, refused.Status)
	}
	checks := c.do(t, 0, "POST", "/limits/check", `{"checks":[`+strings.Repeat(`{"policy":"api","key":"u1","cost":5},`, 1)+`{"policy":"api","key":"u1"}]}`)
	if checks.Status != 429 {
		t.Fatalf("check: %d %s, want 429", checks.Status, checks.Body)
	}

	lines := logs.requestLines(t)
	byID := map[string]map[string]any{}
	for _, l := range lines {
		switch l["route"] {
		case "/metrics", "/healthz", "/readyz":
			t.Errorf("a %s line at INFO: %v", l["route"], l)
		}
		if id, _ := l["request_id"].(string); id != "" {
			byID[id] = l
		}
	}
	ok := byID[sent.Header.Get("X-Request-Id")]
	no := byID[refused.Header.Get("X-Request-Id")]
	lim := byID[checks.Header.Get("X-Request-Id")]
	if ok == nil || no == nil || lim == nil {
		t.Fatalf("no line for a request ID the caller got; lines: %v", lines)
	}
	masked := guard.MaskPhone(phone)
	if no["code"] != "cooldown" || no["phone"] != masked || no["status"] != float64(429) || no["route"] != "/otp/send" {
		t.Errorf("refusal's line %v, want code cooldown, phone %s, status 429, route /otp/send", no, masked)
	}
	if _, has := ok["code"]; has || ok["phone"] != masked {
		t.Errorf("success's line %v, want no code and phone %s", ok, masked)
	}
	if lim["code"] != "rate_limited" || lim["phone"] != nil {
		t.Errorf("denied check's line %v, want code rate_limited and no phone", lim)
	}
	for _, l := range []map[string]any{ok, no, lim} {
		ms, isNum := l["latency_ms"].(float64)
		if !isNum || ms <= 0 {
			t.Errorf("latency_ms %v (%T), want a positive number of milliseconds", l["latency_ms"], l["latency_ms"])
		}
		if _, has := l["latency"]; has {
			t.Errorf("line %v still has the raw latency", l)
		}
		raw, _ := json.Marshal(l)
		if strings.Contains(string(raw), phone) || strings.Contains(string(raw), strings.TrimPrefix(phone, "+")) {
			t.Errorf("line %s holds the full number", raw)
		}
	}
}

// TestProbeLinesAtDebug: the probes are logged, at DEBUG.
func TestProbeLinesAtDebug(t *testing.T) {
	c, logs := loggedInstance(t, "debug", whyPolicies())
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if r := c.doKey(t, 0, "GET", path, "", ""); r.Status != 200 {
			t.Fatalf("GET %s: %d", path, r.Status)
		}
	}
	seen := map[any]bool{}
	for _, l := range logs.requestLines(t) {
		seen[l["route"]] = true
		if l["level"] != "DEBUG" {
			t.Errorf("%s line at %v, want DEBUG", l["route"], l["level"])
		}
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if !seen[path] {
			t.Errorf("no DEBUG line for %s", path)
		}
	}
}

// TestTooManyAttemptsSaysWhenToAskAgain: a locked code's refusal says when
// a new code may be requested, and a send before then is refused with the
// same Retry-After. miniredis's clock is frozen, so the figures are exact.
func TestTooManyAttemptsSaysWhenToAskAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(p *guard.Policies)
		want   int // seconds
		code   string
	}{
		{"cooldown", func(p *guard.Policies) { p.OTP.Cooldown = 45 * time.Second }, 45, "cooldown"},
		{"number's window spent", func(p *guard.Policies) {
			p.OTP.Cooldown = 0
			p.OTP.PerPhone = guard.Window{Limit: 1, Window: time.Hour}
		}, 3600, "phone_rate_limited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := defaults()
			p.OTP.MaxVerifyAttempts = 1
			tc.policy(&p)
			c, _ := miniCluster(t, 1, p)
			sendTo(t, c, 0)
			code := c.out.LastCode(t, phone)
			if r := verify(t, c, 0, wrong(code)); r.Status != 400 {
				t.Fatalf("wrong guess: %d %s", r.Status, r.Body)
			}
			r := verify(t, c, 0, code)
			if r.Status != 429 || r.json(t)["code"] != "too_many_attempts" {
				t.Fatalf("guess at a locked code: %d %s, want 429 too_many_attempts", r.Status, r.Body)
			}
			ra := r.Header.Get("Retry-After")
			if ra != strconv.Itoa(tc.want) || r.json(t)["retry_after"] != float64(tc.want) {
				t.Errorf("Retry-After %q, retry_after %v; want %d", ra, r.json(t)["retry_after"], tc.want)
			}
			if d, _ := r.json(t)["detail"].(string); !strings.Contains(d, "in "+ra+" s") {
				t.Errorf("detail %q does not say the Retry-After (%s s)", d, ra)
			}
			s := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
			if s.Status != 429 || s.json(t)["code"] != tc.code || s.Header.Get("Retry-After") != ra {
				t.Errorf("send after the lock: %d %s Retry-After %q; want 429 %s Retry-After %s",
					s.Status, s.Body, s.Header.Get("Retry-After"), tc.code, ra)
			}
		})
	}
}

// TestRateLimitAgreesWithRetryAfter: a token bucket's denial tells the
// same wait in RateLimit's t as in Retry-After: when a token is back, not
// when the bucket is whole again.
func TestRateLimitAgreesWithRetryAfter(t *testing.T) {
	c, _ := miniCluster(t, 1, whyPolicies()) // api: 5 tokens, one back every 10 s
	if r := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":"u","cost":5}`); r.Status != 200 {
		t.Fatalf("spend the bucket: %d %s", r.Status, r.Body)
	}
	r := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":"u"}`)
	if r.Status != 429 {
		t.Fatalf("empty bucket: %d %s, want 429", r.Status, r.Body)
	}
	ra, rl := r.Header.Get("Retry-After"), r.Header.Get("RateLimit")
	if ra != "10" || rl != `"api";r=0;t=10` {
		t.Errorf("Retry-After %q, RateLimit %q; want 10 and \"api\";r=0;t=10 (a token in 10 s; whole in 50 s)", ra, rl)
	}
	// Allowed: t is still when the bucket is whole (r is what is left).
	ok := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":"v"}`)
	if ok.Status != 200 || ok.Header.Get("RateLimit") != `"api";r=4;t=10` {
		t.Errorf("allowed: %d RateLimit %q, want 200 \"api\";r=4;t=10", ok.Status, ok.Header.Get("RateLimit"))
	}
}
