package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/store"
)

// Timing of the ops side: how long shutdown waits for the audit queue to
// reach the database, and how often retention runs.
const (
	auditFlushTimeout = 5 * time.Second
	retentionInterval = time.Hour
)

// opsStack is the ops side of a running server: the SQL store, the
// deny-list cache and the audit queue, with their background jobs.
type opsStack struct {
	sql   *store.SQL
	deny  *ops.DenyCache
	audit *ops.AuditQueue
	desk  *ops.Desk
	// sessionKey signs ops sessions (see opsSessionKey).
	sessionKey []byte

	stop context.CancelFunc
	wg   sync.WaitGroup
	log  *slog.Logger
}

// startOps opens the SQL store (migrating it, or refusing an old schema),
// loads the deny-list and starts the deny-list refresher, the audit writer
// and the retention job. They run until Close, not until ctx ends: events
// of requests finishing during shutdown must still be written. counter
// (the Fallback) counts failed ops sign-ins.
func startOps(ctx context.Context, cfg *Config, log *slog.Logger, metrics *httpapi.Metrics, blocks ops.BlockIndex, counter guard.Counter, opts options) (*opsStack, error) {
	db, err := openOpsStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	o := &opsStack{sql: db, sessionKey: opsSessionKey(cfg.HMACKey), log: log}
	om := httpapi.NewOpsMetrics(metrics, func() int {
		if o.audit == nil {
			return 0
		}
		return o.audit.Len()
	})
	o.deny = ops.NewDenyCache(db, ops.DenyCacheOptions{Refresh: cfg.DenyListRefresh, Logger: log, OnRefresh: om.DenyReloaded})
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	err = o.deny.Reload(sctx)
	cancel()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("load the deny-list: %w", err)
	}
	o.audit = ops.NewAuditQueue(db, ops.AuditQueueOptions{Logger: log, OnDrop: om.AuditDropped, OnWrite: om.AuditWritten})
	o.desk = ops.NewDesk(ops.DeskOptions{
		Blocks: blocks, DenyList: db, Deny: o.deny, Audit: db, Activity: db, Events: o.audit, Counter: counter,
		DefaultRegion: cfg.Policies.OTP.DefaultRegion, Logger: log, Now: opts.now, SignIn: opts.signIn,
	})

	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	o.stop = stop
	o.wg.Add(3)
	go func() { defer o.wg.Done(); o.deny.Run(bg) }()
	go func() { defer o.wg.Done(); o.audit.Run(bg) }()
	go func() {
		defer o.wg.Done()
		ops.RunRetention(bg, db, cfg.AuditRetention, retentionInterval, log)
	}()
	log.Info("ops ready", "deny_entries", len(o.deny.Entries()), "deny_refresh", cfg.DenyListRefresh.String(),
		"audit_retention", cfg.AuditRetention.String(), "ops_keys", len(cfg.OpsKeys))
	if len(cfg.OpsKeys) == 0 {
		log.Warn("no OTPGUARD_OPS_KEYS set: the ops page and /ops API refuse everyone")
	}
	return o, nil
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
	if cerr := o.sql.Close(); cerr != nil {
		o.log.Warn("closing the ops database failed", "err", cerr)
	}
	return err
}

// openOpsStore opens the SQL store and applies the migrations, or, with
// OTPGUARD_AUTO_MIGRATE=false, refuses a schema that lacks some.
func openOpsStore(ctx context.Context, cfg *Config, log *slog.Logger) (*store.SQL, error) {
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	db, err := store.OpenSQL(sctx, cfg.DatabaseURL, cfg.DataDir, store.SQLOptions{Timeout: cfg.DatabaseTimeout})
	if err != nil {
		return nil, fmt.Errorf("ops database: %w", err)
	}
	where := databaseLabel(cfg)
	if cfg.AutoMigrate {
		// Migrations may take longer than a dial: no start-up timeout.
		if err := db.Migrate(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("ops database %s: %w", where, err)
		}
	} else if err := db.CheckSchema(sctx); err != nil {
		db.Close()
		if errors.Is(err, store.ErrSchemaOutdated) {
			return nil, fmt.Errorf("refusing to serve on an old schema (OTPGUARD_AUTO_MIGRATE=false): %w", err)
		}
		return nil, fmt.Errorf("ops database %s: %w", where, err)
	}
	log.Info("ops database connected", "engine", db.Engine(), "database", where, "auto_migrate", cfg.AutoMigrate)
	if db.Engine() == store.EngineSQLite && !cfg.Embedded() {
		log.Warn("ops database is a local SQLite file: instances do not share the deny-list or the audit trail; set OTPGUARD_DATABASE_URL (PostgreSQL) when running several")
	}
	return db, nil
}

func databaseLabel(cfg *Config) string {
	if cfg.DatabaseURL == "" {
		return filepath.Join(cfg.DataDir, store.SQLiteFile)
	}
	return redactURL(cfg.DatabaseURL)
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
func fillEmbeddedOpsKey(cfg *Config, log *slog.Logger) error {
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

// Migrate opens the SQL store cfg names, applies the pending migrations
// when up is true, and writes the state of each migration to w
// (`otpguard migrate up|status`).
func Migrate(ctx context.Context, cfg *Config, up bool, w io.Writer) error {
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	db, err := store.OpenSQL(sctx, cfg.DatabaseURL, cfg.DataDir, store.SQLOptions{Timeout: cfg.DatabaseTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(w, "# %s database %s\n", db.Engine(), databaseLabel(cfg))
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
