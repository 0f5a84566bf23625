package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
)

// pgOutage takes the test's PostgreSQL database away and gives it back, on
// the real server: down forbids new connections to it and ends those
// open, as a failover or a crashed server would; up allows them again.
type pgOutage struct {
	admin *sql.DB
	name  string
}

func newPGOutage(t *testing.T, dbURL string) *pgOutage {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := u.Path[1:]
	// The name comes from sqltest, never from input; still, check before
	// splicing it into DDL.
	if !regexp.MustCompile(`^otpguard_test_[0-9a-f]+$`).MatchString(name) {
		t.Fatalf("unexpected test database name %q", name)
	}
	base := os.Getenv("OTPGUARD_TEST_POSTGRES_URL")
	if base == "" {
		base = sqltest.DefaultPostgresURL
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	o := &pgOutage{admin: admin, name: name}
	// Registered after sqltest's drop, so it runs before it: the database
	// must take connections again to be dropped cleanly.
	t.Cleanup(func() { o.up(t); admin.Close() })
	return o
}

func (o *pgOutage) down(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := o.admin.ExecContext(ctx, "ALTER DATABASE "+o.name+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatalf("take the database down: %v", err)
	}
	if _, err := o.admin.ExecContext(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", o.name); err != nil {
		t.Fatalf("end its connections: %v", err)
	}
	// pg_terminate_backend only signals a backend: until it has exited, a
	// pooled connection to it may still answer a query (on a busy machine
	// CI saw a deny-list reload succeed just after down). Down means none
	// is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if err := o.admin.QueryRowContext(ctx,
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", o.name).Scan(&left); err != nil {
			t.Fatalf("count its connections: %v", err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to %s still open 30 s after they were ended", left, o.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (o *pgOutage) up(t *testing.T) {
	t.Helper()
	if _, err := o.admin.ExecContext(context.Background(), "ALTER DATABASE "+o.name+" ALLOW_CONNECTIONS true"); err != nil {
		t.Errorf("bring the database back: %v", err)
	}
}

// TestOpsDatabaseDown: with PostgreSQL gone, sends and verifies still work
// and the deny-list in force stays enforced; the audit events wait in the
// queue and are all written once the database returns.
func TestOpsDatabaseDown(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{instances: 2, engine: sqlstore.EnginePostgres})
	outage := newPGOutage(t, oc.sqlURL)

	if r := oc.ops(t, 0, "POST", "/ops/denylist", `{"pattern":"+4474001","reason":"before the outage"}`); r.Status != http.StatusCreated {
		t.Fatalf("add: %d %s", r.Status, r.Body)
	}
	opsWait(t, "instance 1 to load the entry", func() bool {
		_, ok := oc.nodes[1].deny.Denied("+447400123456", time.Now())
		return ok
	})

	outage.down(t)
	// The ops API that needs the database says so, with a 503.
	if r := oc.ops(t, 0, "GET", "/ops/denylist", ""); r.Status != http.StatusServiceUnavailable {
		t.Errorf("GET /ops/denylist with the database down: %d, want 503: %s", r.Status, r.Body)
	}
	// A failed deny-list refresh, on each instance, for certain: a sleep
	// would leave it to the machine's pace how many the background made.
	for i, n := range oc.nodes {
		if err := n.deny.Reload(context.Background()); err == nil {
			t.Fatalf("instance %d: the deny-list reloaded with the database down", i)
		}
	}

	var phones []string
	for i := range 10 {
		phone := fmt.Sprintf("+1415555%04d", 100+i)
		phones = append(phones, phone)
		if status, code := oc.send(t, i, phone); status != http.StatusOK {
			t.Fatalf("send %s with the database down: %d %s, want 200", phone, status, code)
		}
		r := oc.do(t, i+1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`)
		if r.Status != http.StatusOK {
			t.Fatalf("verify %s with the database down: %d %s", phone, r.Status, r.Body)
		}
	}
	for i := range 2 {
		if _, code := oc.send(t, i, "+447400123456"); code != "denied" {
			t.Errorf("instance %d, deny-listed number with the database down: %q, want denied (the last list stays in force)", i, code)
		}
	}
	// Events reach the queues on their own time (a delivery's after its
	// answer; the writer counts a batch in hand a moment after taking
	// it), so wait for them rather than look once.
	opsWait(t, "at least 20 events waiting in the queues", func() bool {
		return oc.nodes[0].audit.Len()+oc.nodes[1].audit.Len() >= 20
	})
	if err := oc.nodes[0].db.Ping(context.Background()); err == nil {
		t.Fatal("the database still answers: the outage did not happen")
	}

	outage.up(t)
	opsWait(t, "every event written after the database returned", func() bool {
		for _, phone := range phones {
			if len(oc.eventsIn(t, phone)) != 2 { // its send and its verify
				return false
			}
		}
		return len(oc.eventsIn(t, "+447400123456")) == 2
	})
	for _, phone := range phones {
		got := map[string]string{}
		for _, e := range oc.eventsIn(t, phone) {
			got[e.Action] = e.Outcome
		}
		if got["otp.send"] != "sent" || got["otp.verify"] != "valid" {
			t.Errorf("%s: events %v, want otp.send sent and otp.verify valid", phone, got)
		}
	}
	for i, n := range oc.nodes {
		if n.audit.Dropped() != 0 {
			t.Errorf("instance %d dropped %d events", i, n.audit.Dropped())
		}
	}
	if r := oc.ops(t, 0, "GET", "/ops/events?action=otp.send&limit=1000", ""); r.Status != http.StatusOK {
		t.Errorf("GET /ops/events after the database returned: %d", r.Status)
	}
}

// TestOpsDatabaseBlackHoled: with PostgreSQL black-holed (the network drops
// every byte; nothing is refused), every ops route that needs it answers a
// 503 database_unavailable problem within the database timeout instead of
// hanging, the page shows the database-unreachable banner, and sends go on.
func TestOpsDatabaseBlackHoled(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EnginePostgres, dbProxy: true, dbTimeout: 300 * time.Millisecond})
	// The client gives up long before TCP would: a hang is a failure here,
	// not a wait.
	client := &http.Client{Timeout: 15 * time.Second}
	call := func(method, path, body string) response {
		t.Helper()
		req, err := http.NewRequest(method, oc.instances[0].srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+opsKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s with the database black-holed: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return response{Status: res.StatusCode, Header: res.Header, Body: b}
	}
	// Before the black hole the database answers, though on a busy host a
	// fresh connection can take longer than the 300 ms timeout: wait for it.
	opsWait(t, "GET /ops/denylist to answer before the black hole", func() bool {
		return call("GET", "/ops/denylist", "").Status == http.StatusOK
	})
	b := newBrowser(t, oc.instances[0].srv.URL)
	if res := b.form("/ops/login", url.Values{"key": {opsKey}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", res.StatusCode)
	}
	_, signedIn := b.do("GET", "/ops", "", "", nil)
	csrf := csrfInPage.FindStringSubmatch(signedIn)
	if csrf == nil {
		t.Fatal("no csrf_token in the page")
	}

	oc.dbProxy.BlackHole()
	// Signing out needs the database (it must outlive Redis): refused,
	// and the session is not pretended gone.
	if res, body := b.do("POST", "/ops/logout", "application/x-www-form-urlencoded", "csrf_token="+url.QueryEscape(csrf[1]), nil); res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "database_unavailable") {
		t.Errorf("sign out with the database black-holed: %d %s, want 503 database_unavailable", res.StatusCode, body)
	}
	if res, _ := b.do("GET", "/ops/blocked", "", "", nil); res.StatusCode != http.StatusOK {
		t.Errorf("the session after a refused sign-out: %d, want 200 (still signed in)", res.StatusCode)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/ops/denylist", ""},
		{"POST", "/ops/denylist", `{"pattern":"+4474001","reason":"during the black hole"}`},
		{"DELETE", "/ops/denylist/1", ""},
		{"GET", "/ops/events", ""},
	} {
		r := call(tc.method, tc.path, tc.body)
		var p httpx.Problem
		_ = json.Unmarshal(r.Body, &p)
		if r.Status != http.StatusServiceUnavailable || p.Code != "database_unavailable" || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: %d %q (Retry-After %q), want 503 database_unavailable with Retry-After",
				tc.method, tc.path, r.Status, p.Code, r.Header.Get("Retry-After"))
		}
		if strings.Contains(string(r.Body), "127.0.0.1") || strings.Contains(string(r.Body), "context deadline") {
			t.Errorf("%s %s: the problem leaks internal error text: %s", tc.method, tc.path, r.Body)
		}
	}
	page := call("GET", "/ops", "")
	if page.Status != http.StatusOK || !strings.Contains(string(page.Body), `id="database-down"`) ||
		!strings.Contains(string(page.Body), "The ops database is unreachable") {
		t.Errorf("GET /ops with the database black-holed: %d, want 200 with the database-unreachable banner:\n%s", page.Status, page.Body)
	}
	if status, code := oc.send(t, 0, "+14155550123"); status != http.StatusOK {
		t.Errorf("send with the database black-holed: %d %s, want 200", status, code)
	}

	oc.dbProxy.Restore()
	opsWait(t, "the ops API to answer again", func() bool {
		return call("GET", "/ops/denylist", "").Status == http.StatusOK
	})
	if page := call("GET", "/ops", ""); strings.Contains(string(page.Body), `id="database-down"`) {
		t.Errorf("the banner stays after the database returned")
	}
}

// TestOpsDatabaseUnreachableAtStart: an instance starts while PostgreSQL is
// black-holed. It serves sends, verifies and limit checks, queues their
// audit events, says it is degraded on /ops/status, answers the ops routes
// that need the database with 503 database_unavailable; once the database
// answers it connects in the background, the ops side recovers and the
// queued events are written.
func TestOpsDatabaseUnreachableAtStart(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EnginePostgres, dbProxy: true, dbDownAtStart: true, dbTimeout: 300 * time.Millisecond})
	status := func() map[string]any {
		t.Helper()
		r := oc.ops(t, 0, "GET", "/ops/status", "")
		if r.Status != http.StatusOK {
			t.Fatalf("GET /ops/status: %d %s", r.Status, r.Body)
		}
		return r.json(t)
	}
	st := status()
	db, _ := st["database"].(map[string]any)
	if st["status"] != "degraded" || db["state"] != "connecting" || db["deny_list_loaded"] != false {
		t.Errorf("/ops/status with the database unreachable since start: %v, want status degraded, database connecting, deny_list_loaded false", st)
	}
	if r := oc.ops(t, 0, "GET", "/ops/denylist", ""); r.Status != http.StatusServiceUnavailable || r.json(t)["code"] != "database_unavailable" {
		t.Errorf("GET /ops/denylist before the database connected: %d %s, want 503 database_unavailable", r.Status, r.Body)
	}
	if r := oc.ops(t, 0, "GET", "/ops", ""); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `id="database-down"`) {
		t.Errorf("GET /ops before the database connected: %d, want 200 with the database-unreachable banner", r.Status)
	}
	const phone = "+14155550124"
	if status, code := oc.send(t, 0, phone); status != http.StatusOK {
		t.Fatalf("send before the database connected: %d %s, want 200", status, code)
	}
	if r := oc.do(t, 0, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`); r.Status != http.StatusOK {
		t.Errorf("verify before the database connected: %d %s", r.Status, r.Body)
	}
	if r := oc.do(t, 0, "POST", "/limits/check", `{"policy":"default","key":"user:42"}`); r.Status != http.StatusOK {
		t.Errorf("limit check before the database connected: %d %s", r.Status, r.Body)
	}
	if n := oc.nodes[0].audit.Len(); n < 2 {
		t.Errorf("audit events waiting: %d, want at least 2 (the send and the verify)", n)
	}

	oc.dbProxy.Restore()
	opsWait(t, "the ops API to answer once the database is back", func() bool {
		return oc.ops(t, 0, "GET", "/ops/denylist", "").Status == http.StatusOK
	})
	opsWait(t, "/ops/status to say ok", func() bool {
		st := status()
		db, _ := st["database"].(map[string]any)
		return st["status"] == "ok" && db["state"] == "up" && db["deny_list_loaded"] == true
	})
	opsWait(t, "the queued send and verify events written", func() bool { return len(oc.eventsIn(t, phone)) == 2 })
	if r := oc.ops(t, 0, "POST", "/ops/denylist", `{"pattern":"+4474002","reason":"after the database came"}`); r.Status != http.StatusCreated {
		t.Errorf("add to the deny-list once connected: %d %s", r.Status, r.Body)
	}
	if _, code := oc.send(t, 0, "+447400212345"); code != "denied" {
		t.Errorf("send to a number deny-listed once connected: %q, want denied", code)
	}
}
