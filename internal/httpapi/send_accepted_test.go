package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestSendAcceptedByProviderIsFinished: a caller that goes away while the
// provider (the real twilio-go client against a slow fake Twilio) is still
// taking the message does not cancel the send. Once the provider has it,
// the code is kept (it verifies) and the answer is stored under the
// Idempotency-Key (a retry replays the success instead of a 429 of the
// spent cooldown).
func TestSendAcceptedByProviderIsFinished(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	arrived := make(chan struct{}, 4)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake twilio: %v", err)
		}
		mu.Lock()
		bodies = append(bodies, r.PostForm.Get("Body"))
		mu.Unlock()
		arrived <- struct{}{}
		time.Sleep(time.Second) // the provider answers after the caller left
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": "SM0123456789abcdef0123456789abcdef", "status": "queued"})
	}))
	t.Cleanup(fake.Close)

	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), defaults())
	cfg.SMS = "twilio"
	cfg.Twilio = config.TwilioConfig{AccountSID: "AC0123", AuthToken: "token", From: "+15005550006", BaseURL: fake.URL}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard))
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { srv.Close(); a.Close() })
	c := &cluster{instances: []*instance{{srv: srv, rdb: a.Redis(), app: a}}}

	const body = `{"phone":"+919800000000"}`
	key := map[string]string{"Idempotency-Key": "signup-42"}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/otp/send", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key["Idempotency-Key"])
	done := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	<-arrived
	time.Sleep(200 * time.Millisecond)
	cancel() // the caller is gone; the provider has the message
	if err := <-done; err == nil {
		t.Fatal("the caller's request finished before it went away")
	}

	// The retry waits for the first request's answer, then replays it.
	r := c.doWith(t, 0, "POST", "/otp/send", body, apiKey, key)
	if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry with the same Idempotency-Key: %d %s (replayed %q), want the stored 200",
			r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
	}
	mu.Lock()
	sent := append([]string(nil), bodies...)
	mu.Unlock()
	if len(sent) != 1 {
		t.Fatalf("the provider got %d messages, want 1", len(sent))
	}
	code := regexp.MustCompile(`\d{6}`).FindString(sent[0])
	if v := c.do(t, 0, "POST", "/otp/verify", verifyBody(code)); v.Status != 200 || v.json(t)["valid"] != true {
		t.Errorf("verifying the delivered code: %d %s, want valid", v.Status, v.Body)
	}
}
