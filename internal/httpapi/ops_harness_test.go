package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

type opsNode struct {
	db    *sqlstore.SQL
	redis *store.Redis
	deny  *ops.DenyCache
	audit *ops.AuditQueue
	desk  *ops.Desk
}

// opsCluster is several instances sharing one real Redis and one SQL
// database, each with its own Redis client, SQL pool, deny-list cache and
// audit queue.
type opsCluster struct {
	*cluster
	nodes []*opsNode
	// sqlURL and sqlDir locate the shared database (a PostgreSQL URL, or
	// the directory of the SQLite file).
	sqlURL, sqlDir string
	// directURL is PostgreSQL without the test's proxies.
	directURL string
	// dbLatency delays PostgreSQL (opsConfig.dbSlow).
	dbLatency *sqltest.Latency
	// dbProxy is between the instances and PostgreSQL (opsConfig.dbProxy).
	dbProxy *redistest.Proxy
	// redis is the test's own Redis (opsConfig.ownRedis).
	redis *redistest.Server
	cfg   opsConfig
	pol   guard.Policies
}

type opsConfig struct {
	instances int
	engine    string        // sqlstore.EnginePostgres or sqlstore.EngineSQLite
	refresh   time.Duration // deny-list refresh; 100ms (the least allowed) when 0
	policies  *guard.Policies
	opsKeys   []string // {opsKey} when nil
	// signIn is the failed sign-in limit; ops.DefaultSignInLimit when zero.
	signIn ops.SignInLimit
	// apiKeys is the wrong API key limit; ops.DefaultAPIKeyLimit when zero.
	apiKeys ops.SignInLimit
	// trustProxies is OTPGUARD_TRUSTED_PROXIES; loopback (where the test's
	// requests come from) must be listed for X-Forwarded-For to count.
	trustProxies []string
	// dbProxy puts a TCP proxy the test controls (oc.dbProxy) between the
	// instances and PostgreSQL, to black-hole the database.
	dbProxy bool
	// dbTimeout is OTPGUARD_DATABASE_TIMEOUT; the default when zero.
	dbTimeout time.Duration
	// dbDownAtStart black-holes dbProxy before the instances start.
	dbDownAtStart bool
	// dbSlow puts a proxy before PostgreSQL whose delay the test sets
	// (oc.dbLatency, sqltest.Slow); oc.directURL still reaches it at once.
	dbSlow bool
	// ownRedis starts a Redis server for this test alone (oc.redis), which
	// it may kill and restart.
	ownRedis bool
	// opts are handed to every app.New (app.WithClock, ...).
	opts []app.Option
	// logs, when set, receives every instance's log at logLevel.
	logs     io.Writer
	logLevel string
}

// loopback trusts the test's own requests as if they came from a proxy.
var loopback = []string{"127.0.0.0/8", "::1/128"}

// newOpsCluster starts the instances; everything stops when the test ends.
func newOpsCluster(t *testing.T, cfg opsConfig) *opsCluster {
	t.Helper()
	if cfg.instances == 0 {
		cfg.instances = 1
	}
	if cfg.refresh == 0 {
		cfg.refresh = 100 * time.Millisecond
	}
	policies := defaults()
	if cfg.policies != nil {
		policies = *cfg.policies
	}
	policies.FillDefaults()
	if err := policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	if cfg.opsKeys == nil {
		cfg.opsKeys = []string{opsKey}
	}
	var tg redistest.Target
	var own *redistest.Server
	if cfg.ownRedis {
		own = redistest.Start(t)
		tg = redistest.Target{URL: own.URL(), Prefix: redistest.Prefix()}
	} else {
		tg = redistest.New(t)
	}
	oc := &opsCluster{cluster: &cluster{out: &guardtest.Outbox{}, prefix: tg.Prefix, url: tg.URL}, redis: own, cfg: cfg, pol: policies}
	switch cfg.engine {
	case sqlstore.EnginePostgres:
		oc.sqlURL = sqltest.Postgres(t)
		oc.directURL = oc.sqlURL
		if cfg.dbSlow {
			oc.sqlURL, oc.dbLatency = sqltest.Slow(t, oc.sqlURL)
		}
		if cfg.dbProxy {
			oc.sqlURL, oc.dbProxy = redistest.ProxyURL(t, oc.sqlURL)
			if cfg.dbDownAtStart {
				oc.dbProxy.BlackHole()
			}
		}
	case sqlstore.EngineSQLite:
		oc.sqlDir = t.TempDir()
	default:
		t.Fatalf("unknown engine %q", cfg.engine)
	}
	for range cfg.instances {
		oc.start(t, policies, cfg)
	}
	return oc
}

func (oc *opsCluster) start(t *testing.T, policies guard.Policies, cfg opsConfig) {
	t.Helper()
	c := testConfig(t, oc.url, oc.prefix, oc.sqlDir, policies)
	c.DatabaseURL, c.DenyListRefresh, c.OpsKeys = oc.sqlURL, cfg.refresh, cfg.opsKeys
	if cfg.dbTimeout > 0 {
		c.DatabaseTimeout = cfg.dbTimeout
	}
	for _, p := range cfg.trustProxies {
		c.TrustedProxies = append(c.TrustedProxies, netip.MustParsePrefix(p))
	}
	opts := append([]app.Option{app.WithSignInLimit(cfg.signIn), app.WithAPIKeyLimit(cfg.apiKeys)}, cfg.opts...)
	if cfg.logs != nil {
		c.LogLevel = cfg.logLevel
		opts = append(opts, app.WithOutput(cfg.logs))
	}
	in := startInstance(t, c, oc.out, opts...)
	a := in.app
	oc.instances = append(oc.instances, in)
	oc.nodes = append(oc.nodes, &opsNode{db: a.SQL(), redis: a.Store(), deny: a.DenyCache(), audit: a.AuditQueue(), desk: a.Ops()})
}

// startMore starts one more instance like the others.
func (oc *opsCluster) startMore(t *testing.T) {
	t.Helper()
	oc.start(t, oc.pol, oc.cfg)
}

// ops sends a request to instance i with the ops key.
func (oc *opsCluster) ops(t testing.TB, i int, method, path, body string) response {
	t.Helper()
	return oc.doKey(t, i, method, path, body, opsKey)
}

// send asks instance i for a code to phone and returns the status and code.
func (oc *opsCluster) send(t testing.TB, i int, phone string) (int, string) {
	t.Helper()
	r := oc.do(t, i, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
	if r.Status == http.StatusOK {
		return r.Status, ""
	}
	var p httpx.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("send %s: %d %s", phone, r.Status, r.Body)
	}
	return r.Status, p.Code
}

// eventsIn returns the events stored for phone, read straight from SQL.
// The read is held to the instance's SQL timeout (300 ms in the outage
// tests, so that a black hole fails fast): on a loaded machine it can time
// out with the database up, so a read that timed out is tried again, for
// up to opsWaitFor; any other error, or a database that keeps timing out,
// fails the test.
func (oc *opsCluster) eventsIn(t testing.TB, phone string) []guard.Event {
	t.Helper()
	db := oc.instances[0].app.SQL() // nil until connected
	if db == nil {
		return nil
	}
	deadline := time.Now().Add(opsWaitFor)
	for {
		events, err := db.ListEvents(context.Background(), ops.EventFilter{Phone: phone, Limit: ops.MaxEventLimit})
		if err == nil {
			return events
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("ListEvents: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// opsWaitFor is how long opsWait waits. It must cover otpguard's own
// back-offs on the way back from an outage, not only a busy machine: a
// database unreachable at start-up is tried again after 0.5, 1, 2, 4, 8,
// then every 10 s (dbRetryMax, app/ops.go), and queued audit events after
// up to 5 s (auditRetryMax). With 10 s, TestOpsDatabaseUnreachableAtStart
// failed whenever its outage lasted past 7.5 s (a loaded machine): the
// next attempt was up to 8 s away from the database's return.
const opsWaitFor = 30 * time.Second

// opsWait polls cond every 20ms for up to opsWaitFor.
func opsWait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(opsWaitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", opsWaitFor, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pathPhone puts a number in a path, its + escaped as a client should.
func pathPhone(phone string) string { return strings.Replace(phone, "+", "%2B", 1) }
