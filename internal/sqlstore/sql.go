// Package sqlstore is the SQL ops database, in PostgreSQL or a SQLite
// file: the deny-list, the emergency overrides, the ops sign-outs and the
// audit trail, which must outlive Redis, and the migrations that shape
// them (run from the migrations directory). It implements ops' interfaces
// for them. The shared Redis is package store.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"go.opentelemetry.io/otel/trace"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/otpguard/otpguard/internal/ops"
)

// The engines Open can open, as Engine reports them. They double as the
// names of the migration directories.
const (
	EnginePostgres = "postgres"
	EngineSQLite   = "sqlite"
)

// SQLiteFile is the name of the SQLite database inside the data directory.
const SQLiteFile = "otpguard.db"

// SQL keeps the ops state that must outlive Redis (deny-list, audit trail)
// in PostgreSQL or in a SQLite file. It is safe for concurrent use.
type SQL struct {
	db       *sql.DB
	engine   string
	migrator *goose.Provider
	now      func() time.Time
	timeout  time.Duration // of every call; see Options
}

// ErrDatabaseUnreachable means the database did not answer (connecting, or
// within the timeout): an outage to wait out, not a configuration to fix.
var ErrDatabaseUnreachable = errors.New("database unreachable")

// Options tune a SQL store.
type Options struct {
	// Timeout bounds every call (connect, query, transaction) unless its
	// context ends sooner, or carries a sooner ops.DatabaseDeadline (the
	// bound of all the calls of one ops request), so that a black-holed
	// database fails a request in Timeout instead of hanging it for as
	// long as TCP takes to give up. Migrate and the retention prunes take
	// their caller's deadline only. Zero: DefaultTimeout.
	Timeout time.Duration
	// TracerProvider, when set, traces every SQL call (trace.go).
	TracerProvider trace.TracerProvider
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 3 * time.Second

// bound gives ctx the per-call deadline, or the deadline of the request's
// database work (ops.DatabaseDeadline) when sooner, or keeps ctx's own
// when sooner still.
func (s *SQL) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ops.DatabaseDeadline(ctx); ok && time.Until(d) < s.timeout {
		return context.WithDeadline(ctx, d)
	}
	return context.WithTimeout(ctx, s.timeout)
}

var (
	_ ops.DenyList = (*SQL)(nil)
	_ ops.AuditLog = (*SQL)(nil)
)

// Open connects to PostgreSQL when databaseURL starts with postgres:// or
// postgresql://, and to the SQLite file <dataDir>/otpguard.db (creating
// dataDir) when databaseURL is empty. It does not migrate: call Migrate, or
// CheckSchema to refuse an old schema. The first opts, if any, tune it.
func Open(ctx context.Context, databaseURL, dataDir string, opts ...Options) (*SQL, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	var (
		s   *SQL
		err error
	)
	if err := CheckDatabaseURL(databaseURL); err != nil {
		return nil, fmt.Errorf("store: open database: %w", err)
	}
	if databaseURL == "" {
		s, err = openSQLite(dataDir, o.TracerProvider)
	} else {
		s, err = openPostgres(databaseURL, o.TracerProvider)
	}
	if err != nil {
		return nil, err
	}
	s.timeout = o.Timeout
	pctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.db.PingContext(pctx); err != nil {
		s.db.Close()
		// A server that answered with an error (a wrong password, no such
		// database) is reachable: that is for a person to fix, not to wait out.
		var answered *pgconn.PgError
		if errors.As(err, &answered) {
			return nil, fmt.Errorf("store: connect to %s: %w", s.engine, err)
		}
		return nil, fmt.Errorf("store: connect to %s: %w: %w", s.engine, ErrDatabaseUnreachable, err)
	}
	if s.migrator, err = newMigrator(s.db, s.engine); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// CheckDatabaseURL checks a database URL without connecting: "" (the SQLite
// file) or a PostgreSQL URL pgx can parse. Only the scheme or the parser's
// reason is quoted in the error: the rest of a URL may hold a password.
func CheckDatabaseURL(databaseURL string) error {
	if databaseURL == "" {
		return nil
	}
	lower := strings.ToLower(databaseURL)
	if !strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://") {
		scheme, _, _ := strings.Cut(databaseURL, ":")
		return fmt.Errorf("unsupported scheme %q: want postgres:// or postgresql://, or no URL for SQLite", scheme)
	}
	if _, err := pgconn.ParseConfig(databaseURL); err != nil {
		reason := "malformed"
		if inner := errors.Unwrap(err); inner != nil {
			reason = inner.Error()
		}
		return fmt.Errorf("not a PostgreSQL URL pgx can read (%s)", reason)
	}
	return nil
}

func openPostgres(databaseURL string, tp trace.TracerProvider) (*SQL, error) {
	db, err := openDB("pgx", databaseURL, "postgresql", tp)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	// Every instance holds its own pool; keep it modest so that many
	// instances do not exhaust the server's max_connections.
	db.SetMaxOpenConns(10)
	db.SetMaxIdleConns(10)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return &SQL{db: db, engine: EnginePostgres, now: time.Now}, nil
}

func openSQLite(dataDir string, tp trace.TracerProvider) (*SQL, error) {
	if dataDir == "" {
		return nil, errors.New("store: open sqlite: no data directory")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	path := filepath.Join(dataDir, SQLiteFile)
	// The driver reads everything after '?' as its own parameters.
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("store: open sqlite: data directory %q contains '?'", dataDir)
	}
	// WAL lets readers in other processes (otpguard migrate status, a
	// backup) work while we write. busy_timeout makes a locked file a wait,
	// not an error. _txlock=immediate takes the write lock at BEGIN, so two
	// processes never both read under a deferred lock and then deadlock on
	// the upgrade. temp_store(MEMORY): a multi-row INSERT (the audit
	// trail's batches) keeps a statement journal of every page it
	// touches, so that it can be undone alone; in a temporary file that
	// is a write syscall per page, in memory a copy, and the rows are no
	// less durable (the journal only undoes a statement, the WAL commits
	// it). wal_autocheckpoint(10000): the commit that takes the WAL past
	// 10,000 pages (40 MB, the default is 1,000) copies them into the
	// file and fsyncs it. Pages an audit batch dirties again and again
	// (the table's last page, the ends of its indexes, their inner pages)
	// are then copied once per 10,000 pages, not once per 1,000: the
	// checkpoints are a large share of the audit writer's work
	// (BenchmarkWriteEvents weighs them).
	dsn := path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)" +
		"&_pragma=wal_autocheckpoint(10000)&_txlock=immediate"
	db, err := openDB("sqlite", dsn, "sqlite", tp)
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	// SQLite has one writer at a time. One connection turns concurrent
	// writers in this process into a queue in database/sql instead of
	// SQLITE_BUSY errors, and keeps the connection (and its pragmas) alive.
	// Nothing here holds a connection while asking for another, so it
	// cannot deadlock.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return &SQL{db: db, engine: EngineSQLite, now: time.Now}, nil
}

// Engine returns EnginePostgres or EngineSQLite.
func (s *SQL) Engine() string { return s.engine }

// Ping checks that the database answers, for readiness probes.
func (s *SQL) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: ping %s: %w", s.engine, err)
	}
	return nil
}

// Close closes the connection pool.
func (s *SQL) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.engine, err)
	}
	return nil
}

// rebind turns the '?' placeholders every query is written with into
// PostgreSQL's $1, $2, ... Queries here contain no '?' in literals.
func (s *SQL) rebind(query string) string {
	if s.engine != EnginePostgres {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// Times are stored as unix milliseconds (UTC) on both engines. Stores hand
// back times already truncated that way, so that what a caller is returned
// on write equals what it reads later.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func truncMillis(t time.Time) time.Time { return fromMillis(t.UnixMilli()) }
