package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// Timing of the ops side: how long shutdown waits for the audit queue to
// reach the database, and how often retention runs.
const (
	auditFlushTimeout = 5 * time.Second
	retentionInterval = time.Hour
	// auditLinger batches the audit trail's writes: every send is an
	// event, and a transaction per event would cost a large share of a
	// send's CPU (docs/benchmarks.md). Events reach the trail up to this
	// much later.
	auditLinger = 20 * time.Millisecond
)

// opsStack is the ops side of a running server: the SQL store, the
// deny-list cache, the sign-outs and the audit queue, with their
// background jobs.
type opsStack struct {
	cfg *config.Config
	// db is the SQL store, once connected.
	db       *sqlstore.Lazy
	deny     *ops.DenyCache
	signOuts *ops.SignOuts
	audit    *ops.AuditQueue
	desk     *ops.Desk
	// overrides are the emergency overrides in force here, loaded with
	// every deny-list refresh (ops/overrides.go); now is the desk's clock.
	overrides *ops.OverrideCache
	now       func() time.Time
	// sessionKey signs ops sessions (see opsSessionKey).
	sessionKey []byte

	bg   context.Context // the background jobs' context, cancelled by stop
	stop context.CancelFunc
	wg   sync.WaitGroup
	log  *slog.Logger
	// sqlTracer traces the SQL calls; nil: tracing is off.
	sqlTracer trace.TracerProvider
}

// Retries of a database that was unreachable at start-up.
const (
	dbRetryMin = 500 * time.Millisecond
	dbRetryMax = 10 * time.Second
	// migrateTimeout bounds applying the migrations at start: long enough
	// for an index on a large table, short of a hang on a database that
	// stopped answering mid-way (then the start goes on without it).
	migrateTimeout = 5 * time.Minute
)

// startOps opens the SQL store (migrating it, or refusing an old schema),
// loads the deny-list and the sign-outs and starts their refreshers, the
// audit writer and the retention job. They run until Close, not until ctx
// ends: events of requests finishing during shutdown must still be
// written. shared (Redis) also holds every sign-out.
//
// A database that does not answer does not stop the start: OTP sends and
// limit checks need no SQL. The instance serves them, queues the audit
// events, enforces an empty deny-list, answers the ops routes that need
// the database with 503 database_unavailable, and connects (and migrates)
// in the background.
func startOps(ctx context.Context, cfg *config.Config, log *slog.Logger, metricSet *metrics.Set, blocks ops.BlockIndex, shared ops.SharedSignOuts, opts options) (*opsStack, error) {
	o := &opsStack{cfg: cfg, db: &sqlstore.Lazy{}, sessionKey: opsSessionKey(cfg.HMACKey), log: log, sqlTracer: opts.sqlTracer}
	om := metrics.NewOps(metricSet, func() int {
		if o.audit == nil {
			return 0
		}
		return o.audit.Len()
	})
	o.now = opts.now
	o.overrides = ops.NewOverrideCache(o.db, opts.now, log)
	o.deny = ops.NewDenyCache(o.db, ops.DenyCacheOptions{Refresh: cfg.DenyListRefresh, Logger: log,
		OnRefresh: func(n int, err error) { o.db.DenyReloaded(err); om.DenyReloaded(n, err) },
		Also:      o.overrides.Reload})
	o.signOuts = ops.NewSignOuts(o.db, ops.SignOutsOptions{Shared: shared, Refresh: cfg.DenyListRefresh, Logger: log})
	o.audit = ops.NewAuditQueue(o.db, ops.AuditQueueOptions{Logger: log, OnDrop: om.AuditDropped, OnWrite: om.AuditWritten,
		Linger: auditLinger})
	o.desk = ops.NewDesk(ops.DeskOptions{
		Blocks: blocks, DenyList: o.db, Deny: o.deny, Audit: o.db, Activity: o.db, ServiceActivity: o.db, Events: o.audit, OnWrite: om.AuditWritten,
		DatabaseTimeout: cfg.DatabaseTimeout,
		DefaultRegion:   cfg.Policies.OTP.DefaultRegion, Logger: log, Now: opts.now,
		Overrides: o.db, OverrideCache: o.overrides, Policy: opts.policy,
	})
	o.bg, o.stop = context.WithCancel(context.WithoutCancel(ctx))

	db, err := openOpsStore(ctx, cfg, log, opts.sqlTracer)
	switch {
	case errors.Is(err, sqlstore.ErrDatabaseUnreachable):
		log.Error("OPS DATABASE UNREACHABLE at start-up: serving OTP sends and limit checks; the deny-list is EMPTY until it loads, "+
			"audit events wait in the queue, and the ops routes that need the database answer 503 until it connects (retrying in the background)",
			"database", cfg.DatabaseLabel(), "err", err)
		o.wg.Add(1)
		go func() { defer o.wg.Done(); o.connect() }()
	case err != nil:
		o.stop()
		return nil, err
	default:
		if err := o.connected(ctx, db); err != nil {
			o.stop()
			db.Close()
			return nil, err
		}
	}

	o.wg.Add(3)
	go func() { defer o.wg.Done(); o.deny.Run(o.bg) }()
	go func() { defer o.wg.Done(); o.signOuts.Run(o.bg) }()
	go func() { defer o.wg.Done(); o.audit.Run(o.bg) }()
	return o, nil
}

// connected puts db in service: it loads the deny-list and the sign-outs
// and starts the retention job. At start-up a failure to load is fatal;
// later (connect) it is retried by the refreshers.
func (o *opsStack) connected(ctx context.Context, db *sqlstore.SQL) error {
	o.db.Connect(db)
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := o.deny.Reload(sctx); err != nil {
		return fmt.Errorf("load the deny-list: %w", err)
	}
	if err := o.signOuts.Reload(sctx); err != nil {
		return fmt.Errorf("load the ops sign-outs: %w", err)
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		ops.RunRetention(o.bg, o.db, o.cfg.AuditRetention, retentionInterval, o.log)
	}()
	o.log.Info("ops ready", "deny_entries", len(o.deny.Entries()), "deny_refresh", o.cfg.DenyListRefresh.String(),
		"audit_retention", o.cfg.AuditRetention.String(), "ops_keys", len(o.cfg.OpsKeys))
	return nil
}

// connect retries the database that was unreachable at start-up, with
// back-off, until it connects (and migrates) or the stack stops.
func (o *opsStack) connect() {
	backoff := dbRetryMin
	for {
		select {
		case <-o.bg.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, dbRetryMax)
		db, err := openOpsStore(o.bg, o.cfg, o.log, o.sqlTracer)
		switch {
		case errors.Is(err, sqlstore.ErrDatabaseUnreachable):
			o.log.Debug("ops database still unreachable", "err", err)
			continue
		case err != nil:
			// It answers, and refuses (an old schema, a wrong password):
			// a person must act; say so at every attempt.
			o.log.Error("ops database answers but cannot be used; the ops side stays degraded", "err", err)
			continue
		}
		if err := o.connected(o.bg, db); err != nil {
			// In service already: the refreshers retry the loads.
			o.log.Warn("ops database connected, but loading from it failed; the refreshers retry", "err", err)
		}
		return
	}
}

// Close stops the background jobs, writes the audit events still queued
// (for at most auditFlushTimeout) and closes the database. It returns an
// error when audit events were lost (counted in the metrics by the queue).
func (o *opsStack) Close() error {
	o.stop()
	o.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), auditFlushTimeout)
	defer cancel()
	var err error
	if lost := o.audit.Close(ctx); lost > 0 {
		err = fmt.Errorf("%d audit events lost at shutdown: the ops database did not take them within %s", lost, auditFlushTimeout)
	}
	if db := o.db.SQL(); db != nil {
		if cerr := db.Close(); cerr != nil {
			o.log.Warn("closing the ops database failed", "err", cerr)
		}
	}
	return err
}

// status is the ops database's state for /ops/status.
func (o *opsStack) status() httpapi.DatabaseStatus {
	state, since, loaded := o.db.State()
	return httpapi.DatabaseStatus{State: state, Since: since, DenyListLoaded: loaded, DenyEntries: len(o.deny.Entries())}
}

// openOpsStore opens the SQL store and applies the migrations, or, with
// OTPGUARD_AUTO_MIGRATE=false, refuses a schema that lacks some.
func openOpsStore(ctx context.Context, cfg *config.Config, log *slog.Logger, tp trace.TracerProvider) (*sqlstore.SQL, error) {
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	db, err := sqlstore.Open(sctx, cfg.DatabaseURL, cfg.DataDir, sqlstore.Options{Timeout: cfg.DatabaseTimeout, TracerProvider: tp})
	if err != nil {
		return nil, fmt.Errorf("ops database: %w", err)
	}
	where := cfg.DatabaseLabel()
	// unreachable tells a database that stopped answering (retried) from
	// one that answered no (fatal).
	unreachable := func(err error) error {
		if db.Ping(ctx) != nil {
			return fmt.Errorf("ops database %s: %w: %w", where, sqlstore.ErrDatabaseUnreachable, err)
		}
		return fmt.Errorf("ops database %s: %w", where, err)
	}
	if cfg.AutoMigrate {
		// Migrations may take longer than a dial: their own timeout.
		mctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		defer cancel()
		if err := db.Migrate(mctx); err != nil {
			err = unreachable(err)
			db.Close()
			return nil, err
		}
	} else if err := db.CheckSchema(sctx); err != nil {
		if errors.Is(err, sqlstore.ErrSchemaOutdated) {
			db.Close()
			return nil, fmt.Errorf("refusing to serve on an old schema (OTPGUARD_AUTO_MIGRATE=false): %w", err)
		}
		err = unreachable(err)
		db.Close()
		return nil, err
	}
	log.Info("ops database connected", "engine", db.Engine(), "database", where, "auto_migrate", cfg.AutoMigrate)
	return db, nil
}

// opsSessionKey derives the key that signs ops sessions from the HMAC key,
// which every instance shares: a session made on one instance is good on
// all, and the key for codes is never used for anything else as is.
func opsSessionKey(hmacKey []byte) []byte {
	if len(hmacKey) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, hmacKey)
	m.Write([]byte("otpguard ops session v1"))
	return m.Sum(nil)
}

// fillEmbeddedOpsKey makes up an ops key in embedded mode when none is set,
// and prints it, as fillEmbeddedSecrets does the API key.
func fillEmbeddedOpsKey(cfg *config.Config, log *slog.Logger) error {
	if len(cfg.OpsKeys) > 0 {
		return nil
	}
	key, err := randomKey("ogo_")
	if err != nil {
		return err
	}
	cfg.OpsKeys = []string{key}
	log.Warn("no OTPGUARD_OPS_KEYS set: generated an ops key for this run (sign in at /ops)", "ops_key", key)
	return nil
}

// runMigrations opens the SQL store cfg names, applies the pending migrations
// when up is true, and writes the state of each migration to w
// (`otpguard migrate up|status`).
func runMigrations(ctx context.Context, cfg *config.Config, up bool, w io.Writer) error {
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	db, err := sqlstore.Open(sctx, cfg.DatabaseURL, cfg.DataDir, sqlstore.Options{Timeout: cfg.DatabaseTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(w, "# %s database %s\n", db.Engine(), cfg.DatabaseLabel())
	if up {
		if err := db.Migrate(ctx); err != nil {
			return err
		}
	}
	states, err := db.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	for _, st := range states {
		fmt.Fprintln(w, st)
	}
	return nil
}
