package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
	"github.com/otpguard/otpguard/internal/store/sqltest"
)

// opsSessionKey is the session key every instance of an opsCluster shares,
// as every otpguard instance derives the same one from OTPGUARD_HMAC_KEY.
var opsSessionKey = []byte("ops-session-key-0123456789abcdef")

// opsNode is the ops side of one instance, wired as serve wires it.
type opsNode struct {
	db    *store.SQL
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
}

type opsConfig struct {
	instances int
	engine    string        // store.EnginePostgres or store.EngineSQLite
	refresh   time.Duration // deny-list refresh; 50ms when 0
	policies  *guard.Policies
	opsKeys   []string // {opsKey} when nil
	// conversions wires the conversion watch (Redis tallies, the ops desk
	// as its deny-list) and the abuse metrics (pumping_test.go).
	conversions bool
	// signIn is the failed sign-in limit; ops.DefaultSignInLimit when zero.
	signIn ops.SignInLimit
}

// newOpsCluster starts the instances; everything stops when the test ends.
func newOpsCluster(t *testing.T, cfg opsConfig) *opsCluster {
	t.Helper()
	if cfg.instances == 0 {
		cfg.instances = 1
	}
	if cfg.refresh == 0 {
		cfg.refresh = 50 * time.Millisecond
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
	tg := redistest.New(t)
	oc := &opsCluster{cluster: &cluster{out: &outbox{}, prefix: tg.Prefix, url: tg.URL}}
	switch cfg.engine {
	case store.EnginePostgres:
		oc.sqlURL = sqltest.Postgres(t)
	case store.EngineSQLite:
		oc.sqlDir = t.TempDir()
	default:
		t.Fatalf("unknown engine %q", cfg.engine)
	}
	for i := range cfg.instances {
		oc.start(t, i, policies, cfg)
	}
	return oc
}

func (oc *opsCluster) start(t *testing.T, i int, policies guard.Policies, cfg opsConfig) {
	t.Helper()
	ctx := context.Background()
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: oc.url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	st := store.NewRedis(rdb, oc.prefix)

	db, err := store.OpenSQL(ctx, oc.sqlURL, oc.sqlDir)
	if err != nil {
		t.Fatalf("OpenSQL: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if i == 0 {
		if err := db.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	n := &opsNode{db: db, redis: st}
	n.deny = ops.NewDenyCache(db, ops.DenyCacheOptions{Refresh: cfg.refresh})
	if err := n.deny.Reload(ctx); err != nil {
		t.Fatalf("deny-list: %v", err)
	}
	n.audit = ops.NewAuditQueue(db, ops.AuditQueueOptions{})
	n.desk = ops.NewDesk(ops.DeskOptions{Blocks: st, DenyList: db, Deny: n.deny, Audit: db, Activity: db, Events: n.audit,
		Counter: st, SignIn: cfg.signIn})

	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.deny.Run(bg) }()
	go func() { defer wg.Done(); n.audit.Run(bg) }()
	t.Cleanup(func() {
		stop()
		wg.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.audit.Close(cctx)
	})

	hmacKey := []byte("0123456789abcdef0123456789abcdef")
	oo := guard.OTPOptions{Policy: policies.OTP, Counter: st, Codes: st, Sender: oc.out, HMACKey: hmacKey,
		Deny: n.deny, Events: n.audit, Blocks: st}
	metrics := httpapi.NewMetrics()
	abuse := httpapi.NewAbuseMetrics(metrics)
	if cfg.conversions {
		oo.Conversions, oo.AutoBlock, oo.Abuse = st, n.desk, abuse.Hooks()
	}
	otp := guard.NewOTP(oo)
	h := httpapi.New(httpapi.Options{
		OTP: otp, Limiter: guard.NewLimiter(policies.Limits, st, nil),
		APIKeys: []string{apiKey}, OpsKeys: cfg.opsKeys, Spec: api.OpenAPI,
		Ops: n.desk, SessionKey: opsSessionKey, Sessions: st, Metrics: metrics, AbuseMetrics: abuse,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	oc.instances = append(oc.instances, &instance{srv: srv, rdb: rdb})
	oc.nodes = append(oc.nodes, n)
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
	var p httpapi.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("send %s: %d %s", phone, r.Status, r.Body)
	}
	return r.Status, p.Code
}

// eventsIn returns the events stored for phone, read straight from SQL.
func (oc *opsCluster) eventsIn(t testing.TB, phone string) []guard.Event {
	t.Helper()
	events, err := oc.nodes[0].db.ListEvents(context.Background(), ops.EventFilter{Phone: phone, Limit: ops.MaxEventLimit})
	if err != nil {
		t.Fatalf("ListEvents: %v", err)
	}
	return events
}

// opsWait polls cond every 20ms for up to 10s.
func opsWait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pathPhone puts a number in a path, its + escaped as a client should.
func pathPhone(phone string) string { return strings.Replace(phone, "+", "%2B", 1) }
