package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/otpguard/otpguard/migrations"
)

// ErrSchemaOutdated means the database lacks migrations this otpguard needs.
// serve refuses to start on it unless auto-migrate is on: running against
// missing tables would fail request by request instead of once, loudly.
var ErrSchemaOutdated = errors.New("database schema is out of date")

// migrationTable is goose's version table. A name of our own lets otpguard
// share a PostgreSQL database with another goose user without the two
// reading each other's versions.
const migrationTable = "otpguard_schema_migrations"

// migrationLockID is the PostgreSQL advisory lock held while migrating, so
// that instances starting together with auto-migrate apply each migration
// once. Any fixed number unlikely to be used by another application.
const migrationLockID int64 = 0x6f7470677561 // "otpgua"

func newMigrator(db *sql.DB, engine string) (*goose.Provider, error) {
	fsys, err := fs.Sub(migrations.FS, engine)
	if err != nil {
		return nil, fmt.Errorf("store: migrations for %s: %w", engine, err)
	}
	opts := []goose.ProviderOption{
		goose.WithTableName(migrationTable),
		// Go migrations registered globally by any imported package must
		// not end up in our schema.
		goose.WithDisableGlobalRegistry(true),
	}
	dialect := goose.DialectSQLite3
	if engine == EnginePostgres {
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID))
		if err != nil {
			return nil, fmt.Errorf("store: migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	// goose has no lock for SQLite; Migrate settles races instead (see
	// retrySQLiteUp).
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: migrations for %s: %w", engine, err)
	}
	return p, nil
}

// MigrationState is one migration as `otpguard migrate status` shows it.
type MigrationState struct {
	Version   int64
	Name      string // file name, e.g. "00001_init.sql"
	Applied   bool
	AppliedAt time.Time // zero while pending
}

// String formats the state as one status line.
func (m MigrationState) String() string {
	if !m.Applied {
		return fmt.Sprintf("%-30s pending", m.Name)
	}
	return fmt.Sprintf("%-30s applied %s", m.Name, m.AppliedAt.UTC().Format(time.RFC3339))
}

// Migrate applies every pending migration. It is safe to run from several
// instances at once on PostgreSQL (an advisory lock serialises them) and
// does nothing on an up-to-date schema.
func (s *SQL) Migrate(ctx context.Context) error {
	_, err := s.migrator.Up(ctx)
	if err != nil && s.engine == EngineSQLite {
		err = s.retrySQLiteUp(ctx, err)
	}
	if err != nil {
		return fmt.Errorf("store: migrate up: %w", err)
	}
	return nil
}

// retrySQLiteUp settles a race goose cannot prevent on SQLite, where it has
// no lock: two processes (serve with auto-migrate, `otpguard migrate up`)
// may both decide to apply the same migration. Each migration runs in its
// own BEGIN IMMEDIATE transaction, so they never interleave; the loser fails
// on "table already exists". If nothing is pending afterwards, the other
// process did the work. Otherwise Up is tried again, at most once per
// migration, since each lost race means the winner applied one more.
func (s *SQL) retrySQLiteUp(ctx context.Context, err error) error {
	for range s.migrator.ListSources() {
		if pending, perr := s.migrator.HasPending(ctx); perr == nil && !pending {
			return nil
		}
		if _, err = s.migrator.Up(ctx); err == nil {
			return nil
		}
	}
	return err
}

// MigrateDown rolls back the most recent migration. It exists for tests
// and for an operator undoing a bad release; it destroys data.
func (s *SQL) MigrateDown(ctx context.Context) error {
	if _, err := s.migrator.Down(ctx); err != nil {
		return fmt.Errorf("store: migrate down: %w", err)
	}
	return nil
}

// MigrationStatus lists every migration this otpguard knows, oldest first,
// with whether the database has it.
func (s *SQL) MigrationStatus(ctx context.Context) ([]MigrationState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	st, err := s.migrator.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: migration status: %w", err)
	}
	out := make([]MigrationState, 0, len(st))
	for _, m := range st {
		out = append(out, MigrationState{
			Version:   m.Source.Version,
			Name:      path.Base(m.Source.Path),
			Applied:   m.State == goose.StateApplied,
			AppliedAt: m.AppliedAt,
		})
	}
	return out, nil
}

// CheckSchema returns an error wrapping ErrSchemaOutdated when migrations
// are pending. A database newer than this binary passes: migrations only
// add, so an older instance keeps working during a rolling upgrade.
func (s *SQL) CheckSchema(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pending, err := s.migrator.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("store: check schema: %w", err)
	}
	if !pending {
		return nil
	}
	current, target, err := s.migrator.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("store: check schema: %w", err)
	}
	return fmt.Errorf("store: check schema: %s database at version %d, this otpguard needs %d; run `otpguard migrate up` or enable auto-migrate: %w",
		s.engine, current, target, ErrSchemaOutdated)
}
