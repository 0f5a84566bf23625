package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestShutdownWithHungProvider: a send waiting on a Twilio that never
// answers when the program is told to stop ends by the provider's timeout,
// its outcome is in the audit trail, and the program exits cleanly (nil,
// exit 0): a hung provider is the provider's failure, not the shutdown's.
// The drain must not end the send's context.
func TestShutdownWithHungProvider(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body: only then does the server notice the caller
		// hanging up (r.Context ends).
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // hung: answers nothing until the caller gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer fake.Close()
	defer close(release)

	dir := t.TempDir()
	p := boot(t, map[string]string{
		"OTPGUARD_SMS":        "twilio",
		"OTPGUARD_DATA_DIR":   dir,
		"TWILIO_ACCOUNT_SID":  "AC00000000000000000000000000000001",
		"TWILIO_AUTH_TOKEN":   "tok0123456789",
		"TWILIO_FROM":         "+14155550100",
		"TWILIO_API_BASE_URL": fake.URL,
	})
	go drainLines(p)
	type answer struct {
		status int
		body   map[string]any
	}
	answered := make(chan answer, 1)
	go func() {
		status, body := p.post(t, "/otp/send", `{"phone":"+91 98000 00000"}`)
		answered <- answer{status, body}
	}()
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the send never reached the fake Twilio")
	}

	if err := p.stop(t, 30*time.Second); err != nil {
		t.Fatalf("run with a send stuck on the provider returned %v, want nil (exit 0)", err)
	}
	select {
	case a := <-answered:
		if a.status != http.StatusBadGateway || a.body["code"] != "provider_unavailable" {
			t.Errorf("the send in flight was answered %d %v, want 502 provider_unavailable", a.status, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the send in flight was never answered")
	}
	// Its outcome reached the audit trail before the program exited.
	db, err := sqlstore.Open(t.Context(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	events, err := db.ListEvents(t.Context(), ops.EventFilter{Phone: "+919800000000", Action: "otp.send"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Outcome != "provider_unavailable" {
		t.Errorf("audit trail of the send: %+v, want one otp.send provider_unavailable", events)
	}
}

// TestShutdownWithHungDatabase: audit events the database cannot take at
// shutdown are lost; the program says how many and exits with an error,
// not silently with 0.
func TestShutdownWithHungDatabase(t *testing.T) {
	dbURL, proxy := redistest.ProxyURL(t, sqltest.Postgres(t))

	p := boot(t, map[string]string{
		"OTPGUARD_DATABASE_URL":     dbURL,
		"OTPGUARD_DATABASE_TIMEOUT": "300ms",
		"OTPGUARD_REDIS_TIMEOUT":    "1s",
	})
	proxy.BlackHole()
	for _, phone := range []string{"+14155550101", "+14155550102", "+14155550103"} {
		if status, body := p.post(t, "/otp/send", `{"phone":"`+phone+`"}`); status != http.StatusOK {
			t.Fatalf("send %s with the database black-holed: %d %v, want 200 (sends need no SQL)", phone, status, body)
		}
	}
	lost := make(chan float64, 1)
	go func() {
		for m := range p.lines {
			if m["msg"] == "audit events lost at shutdown: the database did not take them in time" {
				n, _ := m["lost"].(float64)
				lost <- n
			}
		}
	}()
	err := p.stop(t, 60*time.Second)
	if err == nil || !strings.Contains(err.Error(), "audit events lost") {
		t.Fatalf("run with audit events stuck on a hung database returned %v, want an error saying audit events were lost", err)
	}
	select {
	case n := <-lost:
		if n < 3 { // each send's event, at least
			t.Errorf("log says %v audit events lost, want at least 3", n)
		}
	case <-time.After(5 * time.Second):
		t.Error("no log line counting the audit events lost")
	}
}

// drainLines reads the program's log so that it never blocks on a full
// pipe.
func drainLines(p *program) {
	for range p.lines {
	}
}

// waitFor polls cond every 20ms for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartWithoutDatabase: the real program starts while PostgreSQL is
// black-holed, serves sends, says degraded on /ops/status and 503 on the
// ops routes that need SQL, then recovers once the database answers, and
// stops cleanly with every audit event written.
func TestStartWithoutDatabase(t *testing.T) {
	dbURL, proxy := redistest.ProxyURL(t, sqltest.Postgres(t))
	proxy.BlackHole()

	p := boot(t, map[string]string{
		"OTPGUARD_DATABASE_URL":     dbURL,
		"OTPGUARD_DATABASE_TIMEOUT": "300ms",
		"OTPGUARD_REDIS_TIMEOUT":    "1s",
	})
	go drainLines(p)
	if status, body := p.post(t, "/otp/send", `{"phone":"+14155550105"}`); status != http.StatusOK {
		t.Fatalf("send with the database unreachable since start: %d %v, want 200", status, body)
	}
	if status, body := p.call(t, "GET", "/ops/status", "", p.opsKey); status != http.StatusOK || body["status"] != "degraded" {
		t.Errorf("/ops/status: %d %v, want 200 degraded", status, body)
	}
	if status, body := p.call(t, "GET", "/ops/events", "", p.opsKey); status != http.StatusServiceUnavailable || body["code"] != "database_unavailable" {
		t.Errorf("/ops/events: %d %v, want 503 database_unavailable", status, body)
	}

	proxy.Restore()
	waitFor(t, 15*time.Second, "the ops side to recover", func() bool {
		status, body := p.call(t, "GET", "/ops/events?phone=%2B14155550105", "", p.opsKey)
		events, _ := body["events"].([]any)
		return status == http.StatusOK && len(events) == 1
	})
	if status, body := p.call(t, "GET", "/ops/status", "", p.opsKey); body["status"] != "ok" {
		t.Errorf("/ops/status once connected: %d %v, want ok", status, body)
	}
	if err := p.stop(t, 30*time.Second); err != nil {
		t.Errorf("run returned %v, want nil", err)
	}
}
