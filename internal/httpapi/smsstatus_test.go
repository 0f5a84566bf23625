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
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/sms"
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
	otp := guard.NewOTP(guard.OTPOptions{Policy: p.OTP, Sender: &outbox{}, Events: rec})
	metrics := httpapi.NewMetrics()
	newServer := func(cb httpapi.StatusCallback) *httptest.Server {
		srv := httptest.NewServer(httpapi.New(httpapi.Options{OTP: otp, APIKeys: []string{apiKey}, Spec: api.OpenAPI,
			Metrics: httpapi.NewMetrics(), StatusCallback: cb}))
		t.Cleanup(srv.Close)
		return srv
	}
	configured := httptest.NewServer(httpapi.New(httpapi.Options{OTP: otp, APIKeys: []string{apiKey}, Spec: api.OpenAPI,
		Metrics: metrics, StatusCallback: sms.TwilioCallback{URL: statusURL, AuthToken: statusToken}}))
	t.Cleanup(configured.Close)
	unconfigured := newServer(nil)

	form := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "MessageStatus": {"delivered"},
		"To": {"+919800000000"}, "AccountSid": {"AC0123"}, "ApiVersion": {"2010-04-01"}}
	// sms.TestTwilioCallbackVerify proves this hand-made signature is the
	// one twilio-go's validator accepts.
	valid := twilioSignature(statusToken, statusURL, form)
	failed := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"undelivered"}, "To": {"+919800000001"}, "ErrorCode": {"30003"}}

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
	if len(rec.e) != 2 {
		t.Fatalf("audit events: got %d, want 2 (the valid reports only): %+v", len(rec.e), rec.e)
	}
	if e := rec.e[0]; e.Action != guard.ActionSMSStatus || e.Outcome != "delivered" || e.Phone != "+919800000000" || e.Country != "IN" {
		t.Errorf("audit event: %+v", e)
	}
	if e := rec.e[1]; e.Outcome != "undelivered" || !strings.Contains(e.Detail, "error_code=30003") {
		t.Errorf("audit event of the undelivered report: %+v", e)
	}
	for status, want := range map[string]float64{"delivered": 1, "undelivered": 1} {
		if got := metricValue(t, metrics, `otpguard_sms_status_total{status="`+status+`"}`); got != want {
			t.Errorf("otpguard_sms_status_total{status=%s}: got %v, want %v", status, got, want)
		}
	}
}
