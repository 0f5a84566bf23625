package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

const (
	statusURL   = "https://otpguard.example/sms/status"
	statusToken = "0123456789abcdef0123456789abcdef"
)

// twilioSignature signs a form as Twilio does: base64(HMAC-SHA1(token,
// url + name1 + value1 + name2 + value2 ...)), names sorted.
func twilioSignature(token, u string, form url.Values) string {
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	sort.Strings(names)
	s := u
	for _, k := range names {
		s += k + form.Get(k)
	}
	m := hmac.New(sha1.New, []byte(token))
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

type events struct {
	mu sync.Mutex
	e  []guard.Event
}

func (e *events) Record(ev guard.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.e = append(e.e, ev)
}

// TestSMSStatusCallback: a report signed with the auth token is recorded
// (204, metric, audit event); a forged or missing signature is 403; without
// a configured callback the route is 404. Every answer holds to the spec.
func TestSMSStatusCallback(t *testing.T) {
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := defaults()
	p.FillDefaults()
	rec := &events{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Sender: &guardtest.Outbox{}, Events: rec})
	reg := metrics.New()
	newServer := func(cb httpapi.StatusCallback) *httptest.Server {
		srv := httptest.NewServer(httpapi.New(httpapi.Options{OTP: otp, APIKeys: []string{apiKey}, Spec: api.OpenAPI,
			Metrics: metrics.New(), StatusCallback: cb}))
		t.Cleanup(srv.Close)
		return srv
	}
	configured := httptest.NewServer(httpapi.New(httpapi.Options{OTP: otp, APIKeys: []string{apiKey}, Spec: api.OpenAPI,
		Metrics: reg, StatusCallback: sms.TwilioCallback{URL: statusURL, AuthToken: statusToken}}))
	t.Cleanup(configured.Close)
	unconfigured := newServer(nil)

	form := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "MessageStatus": {"delivered"},
		"To": {"+919800000000"}, "AccountSid": {"AC0123"}, "ApiVersion": {"2010-04-01"}}
	// sms.TestTwilioCallbackVerify proves this hand-made signature is the
	// one twilio-go's validator accepts.
	valid := twilioSignature(statusToken, statusURL, form)
	failed := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"undelivered"}, "To": {"+919800000001"}, "ErrorCode": {"30003"}}
	// The other channels report to the same URL, signed alike.
	whatsapp := url.Values{"MessageSid": {"SM2"}, "MessageStatus": {"read"}, "To": {"whatsapp:+919800000002"}, "ChannelPrefix": {"whatsapp"}}
	call := url.Values{"CallSid": {"CA3"}, "CallStatus": {"no-answer"}, "To": {"+919800000003"}, "Direction": {"outbound-api"}}

	for _, tc := range []struct {
		name   string
		srv    *httptest.Server
		form   url.Values
		sig    string
		status int
		code   string
	}{
		{"valid signature", configured, form, valid, 204, ""},
		{"valid signature, undelivered", configured, failed, twilioSignature(statusToken, statusURL, failed), 204, ""},
		{"valid signature, whatsapp", configured, whatsapp, twilioSignature(statusToken, statusURL, whatsapp), 204, ""},
		{"valid signature, call", configured, call, twilioSignature(statusToken, statusURL, call), 204, ""},
		{"forged signature of a call", configured, call, twilioSignature("not-the-token", statusURL, call), 403, "forbidden"},
		{"forged signature", configured, form, twilioSignature("not-the-token", statusURL, form), 403, "forbidden"},
		{"signature of another URL", configured, form, twilioSignature(statusToken, "https://evil.example/sms/status", form), 403, "forbidden"},
		{"tampered body", configured, url.Values{"MessageSid": {"SMx"}, "MessageStatus": {"delivered"}, "To": {"+919800000000"}, "AccountSid": {"AC0123"}, "ApiVersion": {"2010-04-01"}}, valid, 403, "forbidden"},
		{"no signature", configured, form, "", 403, "forbidden"},
		{"no callback configured", unconfigured, form, valid, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.form.Encode()
			req, _ := http.NewRequest("POST", tc.srv.URL+"/sms/status", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.sig != "" {
				req.Header.Set("X-Twilio-Signature", tc.sig)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			r := response{Status: res.StatusCode, Header: res.Header, Body: b}
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, b, tc.status)
			}
			where := "POST /sms/status -> " + res.Status
			checkProblem(t, where, tc.code, r)

			sreq := httptest.NewRequest("POST", "/sms/status", strings.NewReader(body))
			sreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.sig != "" {
				sreq.Header.Set("X-Twilio-Signature", tc.sig)
			}
			route, pp, err := router.FindRoute(sreq)
			if err != nil {
				t.Fatalf("the spec has no POST /sms/status: %v", err)
			}
			opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
			in := &openapi3filter.RequestValidationInput{Request: sreq, PathParams: pp, Route: route, Options: opts}
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				t.Errorf("%s: the request does not match the spec: %v", where, err)
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
			out.SetBodyBytes(r.Body)
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Errorf("%s: the response does not match the spec: %v", where, err)
			}
		})
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.e) != 4 {
		t.Fatalf("audit events: got %d, want 4 (the valid reports only): %+v", len(rec.e), rec.e)
	}
	if e := rec.e[2]; e.Outcome != "read" || e.Phone != "+919800000002" || !strings.Contains(e.Detail, "sid=SM2") {
		t.Errorf("audit event of the whatsapp report: %+v", e)
	}
	if e := rec.e[3]; e.Outcome != "no-answer" || e.Phone != "+919800000003" || !strings.Contains(e.Detail, "sid=CA3") {
		t.Errorf("audit event of the call's report: %+v", e)
	}
	if e := rec.e[0]; e.Action != guard.ActionSMSStatus || e.Outcome != "delivered" || e.Phone != "+919800000000" || e.Country != "IN" {
		t.Errorf("audit event: %+v", e)
	}
	if e := rec.e[1]; e.Outcome != "undelivered" || !strings.Contains(e.Detail, "error_code=30003") {
		t.Errorf("audit event of the undelivered report: %+v", e)
	}
	if e := rec.e[2]; !strings.Contains(e.Detail, "channel=whatsapp") {
		t.Errorf("audit event of the whatsapp report: %+v, want its channel", e)
	}
	for series, want := range map[string]float64{`channel="sms",status="delivered"`: 1, `channel="sms",status="undelivered"`: 1,
		`channel="whatsapp",status="read"`: 1, `channel="call",status="no-answer"`: 1, `channel="sms",status="read"`: 0} {
		if got := metricValue(t, reg, `otpguard_sms_status_total{`+series+`}`); got != want {
			t.Errorf("otpguard_sms_status_total{%s}: got %v, want %v", series, got, want)
		}
	}
}

// TestSMSStatusReplayCountedOnce: a signed status callback replayed, on the
// same instance and concurrently on two instances sharing one Redis, is
// recorded and counted once; another status of the same message is a new
// report.
func TestSMSStatusReplayCountedOnce(t *testing.T) {
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), defaults())
	cfg.SMS = "twilio"
	cfg.Twilio = config.TwilioConfig{AccountSID: "AC0123", AuthToken: statusToken, From: "+15005550006", StatusCallback: statusURL}
	c := newClusterConfig(t, 2, cfg)

	post := func(i int, form url.Values) int {
		req, _ := http.NewRequest("POST", c.instances[i].srv.URL+"/sms/status", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Twilio-Signature", twilioSignature(statusToken, statusURL, form))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	counted := func(status string) float64 {
		var sum float64
		for i := range c.instances {
			r := c.doKey(t, i, "GET", "/metrics", "", "")
			for _, line := range strings.Split(string(r.Body), "\n") {
				if strings.HasPrefix(line, `otpguard_sms_status_total{channel="sms",status="`+status+`"}`) {
					v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
					sum += v
				}
			}
		}
		return sum
	}

	delivered := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "MessageStatus": {"delivered"}, "To": {"+919800000000"}}
	for range 2 {
		if st := post(0, delivered); st != 204 {
			t.Fatalf("status callback: %d, want 204 (a replay too)", st)
		}
	}
	if got := counted("delivered"); got != 1 {
		t.Fatalf("the same callback twice: counted %v, want 1", got)
	}

	// Concurrently on both instances: one of them records it.
	sent := url.Values{"MessageSid": {"SMfedcba9876543210fedcba9876543210"}, "MessageStatus": {"sent"}, "To": {"+919800000000"}}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st := post(i%2, sent); st != 204 {
				t.Errorf("concurrent callback: %d, want 204", st)
			}
		}()
	}
	wg.Wait()
	if got := counted("sent"); got != 1 {
		t.Errorf("the same callback 20 times on 2 instances: counted %v, want 1", got)
	}
	// A new status of a message already reported is a new report.
	later := url.Values{"MessageSid": {"SMfedcba9876543210fedcba9876543210"}, "MessageStatus": {"delivered"}, "To": {"+919800000000"}}
	post(1, later)
	if got := counted("delivered"); got != 2 {
		t.Errorf("a later status of the same message: delivered counted %v, want 2", got)
	}
}
