package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestDrainFinishesItsWork: keyed sends still waiting on a slow SMS
// provider when the program is told to stop all answer, every answer is
// kept under its Idempotency-Key, and a retry of each key on a fresh
// instance gets the kept answer without a second SMS. The drain outlasts
// the probe's vouching had the probe stopped with the signal (about 1.5 s
// by default), and Redis answers each call past the 10 ms timeout (a
// proxy holds its replies back): only a probe still running through the
// drain lets those calls be waited for, and keeps the breaker closed.
func TestDrainFinishesItsWork(t *testing.T) {
	// Not parallel, though it has its own redis-server: it holds Redis's
	// replies past the timeout on purpose and rests on the probe's word,
	// which the parallel tests' bursts (eight race-built processes at
	// once, topology_test.go) can starve of the CPU its pings need: CI
	// once saw the probe stop vouching mid-drain beside them.
	const (
		sends  = 10
		wave   = 5 // the breaker's failures in a row (its default)
		apiKey = "drain-key-0123456789abcdef"
		hmac   = "0123456789abcdef0123456789abcdef"
	)
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	prefix := redistest.Prefix()

	arrived, release := make(chan struct{}, sends), make(chan struct{}, sends)
	var mu sync.Mutex
	sms := map[string]int{} // messages the fake Twilio took, per number
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake Twilio: %v", err)
		}
		arrived <- struct{}{}
		<-release // slow: each answers once the test lets one go
		mu.Lock()
		sms[r.PostForm.Get("To")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"sid":"SM1","status":"queued"}`)) // a caller that gave up reads nothing
	}))
	defer fake.Close()
	defer func() { // none left hanging, whatever failed
		for range sends {
			select {
			case release <- struct{}{}:
			default:
			}
		}
	}()
	vars := func(redisURL, timeout string) map[string]string {
		return map[string]string{
			"OTPGUARD_REDIS_URL":     redisURL,
			"OTPGUARD_REDIS_PREFIX":  prefix,
			"OTPGUARD_REDIS_TIMEOUT": timeout,
			"OTPGUARD_API_KEYS":      apiKey,
			"OTPGUARD_HMAC_KEY":      hmac,
			"OTPGUARD_SMS":           "twilio",
			"TWILIO_ACCOUNT_SID":     "AC00000000000000000000000000000001",
			"TWILIO_AUTH_TOKEN":      "tok0123456789",
			"TWILIO_FROM":            "+14155550100",
			"TWILIO_API_BASE_URL":    fake.URL,
		}
	}

	// The instance that drains: default Redis timeout (10 ms), every
	// reply 30 ms late, so each call needs the probe's word to be waited for.
	p := boot(t, vars(proxy.URL(), ""))
	proxy.Delay(30 * time.Millisecond)
	var logMu sync.Mutex
	var logged []map[string]any
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		for m := range p.lines {
			logMu.Lock()
			logged = append(logged, m)
			logMu.Unlock()
		}
	}()

	type answer struct {
		status int
		body   string
	}
	phone := func(i int) string { return fmt.Sprintf("+4479000000%02d", i) }
	body := func(i int) string { return `{"phone":"` + phone(i) + `"}` }
	idemKey := func(i int) string { return fmt.Sprintf("drain-%s-%d", prefix, i) }
	answers := make([]answer, sends)
	answered := make(chan struct{}, sends)
	var wg sync.WaitGroup
	for i := range sends {
		wg.Go(func() {
			status, _, b := keyedSend(t, p.url, apiKey, idemKey(i), body(i))
			answers[i] = answer{status, b}
			answered <- struct{}{}
		})
	}
	for i := 0; i < sends; {
		select {
		case <-arrived:
			i++
		case <-answered: // a send that never reached the fake Twilio: say why
			for range sends {
				release <- struct{}{} // buffered: none left hanging
			}
			wg.Wait()
			t.Fatalf("%d of %d sends reached the fake Twilio; the answers: %v", i, sends, answers)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d sends reached the fake Twilio", i, sends)
		}
	}

	stopped := make(chan error, 1)
	go func() { stopped <- p.stop(t, 60*time.Second) }()
	// Well past the probe's last vouching, had it stopped with the signal.
	time.Sleep(3 * time.Second)
	// Two waves: had the breaker opened on the first's calls, the second's
	// answers would not even reach Redis.
	for range wave {
		release <- struct{}{}
	}
	for range wave {
		<-answered
	}
	time.Sleep(500 * time.Millisecond) // the first wave's answers are stored after they are sent
	for range sends - wave {
		release <- struct{}{}
	}
	wg.Wait()
	if err := <-stopped; err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	<-logDone

	for i, a := range answers {
		if a.status != http.StatusOK {
			t.Errorf("send %d in the drain: %d %s, want 200", i, a.status, a.body)
		}
	}
	for _, m := range logged {
		msg, _ := m["msg"].(string)
		if strings.HasPrefix(msg, "redis breaker open") || strings.Contains(msg, "idempotent answer failed") ||
			strings.Contains(msg, "idempotency claim expired") || strings.Contains(msg, "last flush failed") {
			t.Errorf("log during the drain: %v", m)
		}
	}

	// A fresh instance, straight to Redis: each key's retry is the kept
	// answer, and no second SMS leaves.
	proxy.Delay(0)
	q := boot(t, vars(srv.URL(), "1s"))
	go drainLines(q)
	for i := range sends {
		status, header, b := keyedSend(t, q.url, apiKey, idemKey(i), body(i))
		if status != answers[i].status || b != answers[i].body || header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry of key %d: %d %s (Idempotent-Replayed %q), want the kept answer %d %s",
				i, status, b, header.Get("Idempotent-Replayed"), answers[i].status, answers[i].body)
		}
	}
	if err := q.stop(t, 30*time.Second); err != nil {
		t.Errorf("second instance: run returned %v, want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range sends {
		if n := sms[phone(i)]; n != 1 {
			t.Errorf("SMS to %s: %d, want 1", phone(i), n)
		}
	}
}

// keyedSend posts body to /otp/send with an Idempotency-Key and returns
// the status, the headers and the raw body.
func keyedSend(t *testing.T, url, apiKey, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/otp/send", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("send: %v", err)
		return 0, nil, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}
