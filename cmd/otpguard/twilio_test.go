package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestTwilioThroughTheBinary points the real program at a fake Twilio
// Messages API through TWILIO_API_BASE_URL, as a staging mock would be.
func TestTwilioThroughTheBinary(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if r.URL.Path != "/2010-04-01/Accounts/AC00000000000000000000000000000001/Messages.json" || user != "AC00000000000000000000000000000001" || pass != "tok0123456789" {
			http.Error(w, `{"code":20003,"message":"Authenticate","status":401}`, http.StatusUnauthorized)
			return
		}
		r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if r.PostForm.Get("To") == "+14155550199" {
			w.WriteHeader(400)
			w.Write([]byte(`{"code":21211,"message":"The 'To' number is not a valid phone number.","status":400}`))
			return
		}
		mu.Lock()
		bodies = append(bodies, r.PostForm.Get("To")+" "+r.PostForm.Get("From")+" "+r.PostForm.Get("Body"))
		mu.Unlock()
		w.WriteHeader(201)
		w.Write([]byte(`{"sid":"SM1","status":"queued"}`))
	}))
	defer fake.Close()

	p := boot(t, map[string]string{
		"OTPGUARD_SMS":        "twilio",
		"TWILIO_ACCOUNT_SID":  "AC00000000000000000000000000000001",
		"TWILIO_AUTH_TOKEN":   "tok0123456789",
		"TWILIO_FROM":         "+14155550100",
		"TWILIO_API_BASE_URL": fake.URL,
	})
	if status, body := p.post(t, "/otp/send", `{"phone":"+91 98000 00000"}`); status != 200 {
		t.Fatalf("send through Twilio: %d %v", status, body)
	}
	mu.Lock()
	got := strings.Join(bodies, "\n")
	mu.Unlock()
	if !strings.HasPrefix(got, "+919800000000 +14155550100 Your verification code is ") {
		t.Fatalf("fake Twilio received %q", got)
	}
	if status, body := p.post(t, "/otp/send", `{"phone":"+1 415 555 0199"}`); status != 422 || body["code"] != "invalid_destination" {
		t.Fatalf("send to a number Twilio refuses: %d %v, want 422 invalid_destination", status, body)
	}
}
