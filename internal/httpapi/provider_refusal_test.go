package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// twilioAnswer is how the fake Twilio of these tests answers a message.
type twilioAnswer int32

const (
	twilioCreated      twilioAnswer = iota // 201 queued
	twilioRateLimited                      // 429 20429, Retry-After: 7
	twilioServerError                      // 500 20500
	twilioReset                            // the connection reset once the request is read
	twilioNoAnswer                         // nothing until the caller gives up
	twilioBadRecipient                     // 400 21211, the number is not valid
)

// fakeTwilioAPI answers the Messages API as *answer says, counting calls.
func fakeTwilioAPI(t *testing.T, answer *atomic.Int32, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil { // the request is read in full
			t.Errorf("fake twilio: %v", err)
		}
		calls.Add(1)
		fail := func(status, code int) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": "refused", "status": status})
		}
		switch twilioAnswer(answer.Load()) {
		case twilioCreated:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"sid": "SM0123456789abcdef0123456789abcdef", "status": "queued"})
		case twilioRateLimited:
			w.Header().Set("Retry-After", "7")
			fail(http.StatusTooManyRequests, 20429)
		case twilioServerError:
			fail(http.StatusInternalServerError, 20500)
		case twilioReset:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("fake twilio: hijack: %v", err)
				return
			}
			_ = conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
			_ = conn.Close()
		case twilioNoAnswer:
			select {
			case <-r.Context().Done():
			case <-done:
			}
		case twilioBadRecipient:
			fail(http.StatusBadRequest, 21211)
		}
	}))
	t.Cleanup(func() { close(done); fake.Close() })
	return fake
}

// TestProviderRefusalGivesTheTryBack: when Twilio (the real twilio-go
// client against a fake API) answers that it did not take the message, or
// the connection resets before any answer, the send is 502
// provider_unavailable with a Retry-After, and the number's cooldown and
// per-number count are given back on the real Redis, so the next send of
// that number goes at once; the address's count stays spent. Two
// instances, the numbers' sends at once: every count exact.
func TestProviderRefusalGivesTheTryBack(t *testing.T) {
	var answer atomic.Int32
	var calls atomic.Int64
	fake := fakeTwilioAPI(t, &answer, &calls)
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), defaults())
	cfg.SMS = "twilio"
	cfg.Twilio = config.TwilioConfig{AccountSID: "AC0123", AuthToken: "token", From: "+15005550006", BaseURL: fake.URL}
	c := &cluster{}
	for range 2 {
		a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard))
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		srv := httptest.NewServer(a.Handler())
		t.Cleanup(func() { srv.Close(); a.Close() })
		c.instances = append(c.instances, &instance{srv: srv, rdb: a.Redis(), app: a})
	}
	get := func(key string) int64 {
		t.Helper()
		n, _ := c.instances[0].rdb.Get(context.Background(), tg.Prefix+key).Int64() // missing: 0
		return n
	}

	tests := []struct {
		name       string
		answer     twilioAnswer
		retryAfter string
	}{
		{"429 with Retry-After", twilioRateLimited, "7"},
		{"500", twilioServerError, "5"},
		{"connection reset", twilioReset, "5"},
	}
	const numbers = 4
	for n, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip := fmt.Sprintf("198.51.100.%d", n+1)
			send := func(i int) response {
				return c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":"+9198000%d%04d","client_ip":%q}`, n, i, ip))
			}
			answer.Store(int32(tt.answer))
			var wg sync.WaitGroup
			got := make([]response, numbers)
			for i := range numbers {
				wg.Go(func() { got[i] = send(i) })
			}
			wg.Wait()
			for i, r := range got {
				if r.Status != http.StatusBadGateway || r.json(t)["code"] != "provider_unavailable" {
					t.Fatalf("send %d: %d %s, want 502 provider_unavailable", i, r.Status, r.Body)
				}
				if ra := r.Header.Get("Retry-After"); ra != tt.retryAfter {
					t.Errorf("send %d: Retry-After %q, want %q", i, ra, tt.retryAfter)
				}
				phone := fmt.Sprintf("+9198000%d%04d", n, i)
				if s, cd := get("otp:{"+phone+"}:sends"), get("otp:{"+phone+"}:cooldown"); s != 0 || cd != 0 {
					t.Errorf("number %d after the refusal: sends %d cooldown %d, want 0 0 (given back)", i, s, cd)
				}
			}
			if got := get("otp:ip:{" + ip + "}:sends"); got != numbers {
				t.Errorf("address count %d, want %d (it stays spent)", got, numbers)
			}

			answer.Store(int32(twilioCreated))
			for i := range numbers {
				if r := send(i); r.Status != http.StatusOK {
					t.Fatalf("next send of number %d: %d %s, want 200 at once", i, r.Status, r.Body)
				}
				phone := fmt.Sprintf("+9198000%d%04d", n, i)
				if s := get("otp:{" + phone + "}:sends"); s != 1 {
					t.Errorf("number %d after the send that went: sends %d, want 1", i, s)
				}
			}
		})
	}
}

// TestProviderTimeoutStaysSpent: a timeout once the request was written
// may hide a message that left, and a number Twilio refuses will not take
// the next try either: both keep the number's cooldown and count spent.
func TestProviderTimeoutStaysSpent(t *testing.T) {
	var answer atomic.Int32
	var calls atomic.Int64
	fake := fakeTwilioAPI(t, &answer, &calls)
	tw, err := sms.NewTwilio(sms.TwilioOptions{AccountSID: "AC0123", AuthToken: "token", From: "+15005550006",
		BaseURL: fake.URL, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), defaults())
	c := &cluster{instances: []*instance{startInstance(t, cfg, &guardtest.Outbox{}, app.WithSender(tw))}}

	for n, tc := range []struct {
		name   string
		answer twilioAnswer
		status int
	}{
		{"timeout after the write", twilioNoAnswer, http.StatusBadGateway},
		{"the number refused", twilioBadRecipient, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"phone":"+91980001%04d"}`, n)
			answer.Store(int32(tc.answer))
			before := calls.Load()
			if r := c.do(t, 0, "POST", "/otp/send", body); r.Status != tc.status {
				t.Fatalf("send: %d %s, want %d", r.Status, r.Body, tc.status)
			}
			if got := calls.Load() - before; got != 1 {
				t.Fatalf("calls to Twilio %d, want 1", got)
			}
			answer.Store(int32(twilioCreated))
			r := c.do(t, 0, "POST", "/otp/send", body)
			if r.Status != http.StatusTooManyRequests || r.json(t)["code"] != "cooldown" {
				t.Errorf("next send: %d %s, want 429 cooldown (the try stays spent)", r.Status, r.Body)
			}
		})
	}
}
