package verifyapi_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// auditEvent is what the test reads of GET /ops/events' events.
type auditEvent struct {
	action, outcome, phone, service string
	hasService                      bool
}

// serviceEvents reads the audit trail's events of the Verify routes and
// /otp/... for the numbers phones (filtered by the query q), newest first.
func serviceEvents(t *testing.T, srv *otpguardtest.Server, q url.Values, phones []string) []auditEvent {
	t.Helper()
	status, body := call(t, http.MethodGet, srv.URL+"/ops/events?"+q.Encode(), "", "", "", "", otpguardtest.OpsKey)
	if status != http.StatusOK {
		t.Fatalf("GET /ops/events?%s: %d %v", q.Encode(), status, body)
	}
	list, _ := body["events"].([]any)
	var out []auditEvent
	for _, x := range list {
		e, _ := x.(map[string]any)
		phone, _ := e["phone"].(string)
		if !slices.Contains(phones, phone) {
			continue
		}
		svc, has := e["service"].(string)
		out = append(out, auditEvent{action: e["action"].(string), outcome: e["outcome"].(string), phone: phone,
			service: svc, hasService: has})
	}
	return out
}

// TestVerifyAuditNamesService: the sends, checks, cancels and approvals
// made through the Verify routes carry their service's SID in the audit
// trail, and GET /ops/events?service= lists one service's; /otp/...'s
// events, the default service's, carry none, and service=default lists
// them. The events are written to
// SQL off the request path: the test reads until they are all there.
func TestVerifyAuditNamesService(t *testing.T) {
	srv := startTwoServices(t)
	const p1, p2, p3, p4 = "+14155550190", "+14155550191", "+14155550192", "+14155550193"
	phones := []string{p1, p2, p3, p4}
	post := func(user, pass, path, form string) map[string]any {
		t.Helper()
		status, v := call(t, http.MethodPost, srv.URL+path, "application/x-www-form-urlencoded", form, user, pass, "")
		if status >= 300 {
			t.Fatalf("POST %s %s: %d %v", path, form, status, v)
		}
		return v
	}
	a := "/v2/Services/" + serviceA
	post(keyA, secretA, a+"/Verifications", "To="+url.QueryEscape(p1)+"&Channel=sms")
	code := lastCode(t, srv, p1)
	wrong := map[bool]string{true: "111111", false: "000000"}[code == "000000"]
	post(keyA, secretA, a+"/VerificationCheck", "To="+url.QueryEscape(p1)+"&Code="+wrong)
	post(keyA, secretA, a+"/VerificationCheck", "To="+url.QueryEscape(p1)+"&Code="+code)
	v := post(keyA, secretA, a+"/Verifications", "To="+url.QueryEscape(p2)+"&Channel=sms")
	post(keyA, secretA, a+"/Verifications/"+v["sid"].(string), "Status=canceled")
	b := "/v2/Services/" + serviceB
	v = post(accountB, secretB, b+"/Verifications", "To="+url.QueryEscape(p3)+"&Channel=sms")
	post(accountB, secretB, b+"/Verifications/"+v["sid"].(string), "Status=approved")
	if status, v := call(t, http.MethodPost, srv.URL+"/otp/send", "application/json", `{"phone":"`+p4+`"}`, "", "", otpguardtest.APIKey); status != http.StatusOK {
		t.Fatalf("/otp/send: %d %v", status, v)
	}

	var all []auditEvent
	for try := 0; try < 200 && len(all) < 8; try++ {
		if try > 0 {
			time.Sleep(25 * time.Millisecond)
		}
		all = serviceEvents(t, srv, url.Values{}, phones)
	}
	want := []auditEvent{
		{"otp.send", "sent", p4, "", false},
		{"otp.approve", "approved", p3, serviceB, true},
		{"otp.send", "sent", p3, serviceB, true},
		{"otp.cancel", "canceled", p2, serviceA, true},
		{"otp.send", "sent", p2, serviceA, true},
		{"otp.verify", "valid", p1, serviceA, true},
		{"otp.verify", "wrong_code", p1, serviceA, true},
		{"otp.send", "sent", p1, serviceA, true},
	}
	if !slices.Equal(all, want) {
		t.Fatalf("the audit trail's events, newest first:\n got %v\nwant %v", all, want)
	}
	for _, tc := range []struct {
		service string
		want    []auditEvent
	}{
		{serviceA, want[3:]},
		{serviceB, want[1:3]},
		{"VA000000000000000000000000000000cc", nil},
		{"default", want[:1]}, // the default service's: the events that name no service
	} {
		if got := serviceEvents(t, srv, url.Values{"service": {tc.service}}, phones); !slices.Equal(got, tc.want) {
			t.Errorf("?service=%s:\n got %v\nwant %v", tc.service, got, tc.want)
		}
	}
	for _, bad := range []string{"VA00", "AC0000000000000000000000000000000a", "Default", "none"} {
		if status, v := call(t, http.MethodGet, srv.URL+"/ops/events?service="+bad, "", "", "", "", otpguardtest.OpsKey); status != http.StatusBadRequest || v["code"] != "invalid_request" {
			t.Errorf("?service=%s: %d %v, want 400 invalid_request", bad, status, v)
		}
	}
}
