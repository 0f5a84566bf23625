package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestTwilioThroughTheBinary points the real program at a fake Twilio
// Messages API through TWILIO_API_BASE_URL, as a staging mock would be.
func TestTwilioThroughTheBinary(t *testing.T) {
	const refused = "+14155550199"
	var mu sync.Mutex
	var bodies []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if r.URL.Path != "/2010-04-01/Accounts/AC00000000000000000000000000000001/Messages.json" || user != "AC00000000000000000000000000000001" || pass != "tok0123456789" {
			http.Error(w, `{"code":20003,"message":"Authenticate","status":401}`, http.StatusUnauthorized)
			return
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake Twilio: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		if to := r.PostForm.Get("To"); to == refused {
			// As real Twilio does, the message quotes the number.
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"code":21211,"message":"The 'To' number ` + to + ` is not a valid phone number.","more_info":"https://www.twilio.com/docs/errors/21211","status":400}`))
			return
		}
		mu.Lock()
		bodies = append(bodies, r.PostForm.Get("To")+" "+r.PostForm.Get("From")+" "+r.PostForm.Get("Body"))
		mu.Unlock()
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"sid":"SM1","status":"queued"}`))
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
	// The refusal is logged with Twilio's code, but neither the log nor
	// its "err" may hold the number Twilio's message quoted.
	for {
		m := p.next(t)
		line, _ := json.Marshal(m)
		for _, full := range []string{refused, strings.TrimPrefix(refused, "+")} {
			if strings.Contains(string(line), full) {
				t.Errorf("log line %s holds the full number %s", line, full)
			}
		}
		if m["msg"] == "sms not sent" {
			if err, _ := m["err"].(string); !strings.Contains(err, "21211") {
				t.Errorf("sms not sent: err = %q, want Twilio's code 21211 in it", err)
			}
			break
		}
	}
}
