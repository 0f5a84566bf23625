package sqlstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
)

// engines is every engine the SQL store runs on. Each test runs once per
// engine, so the two cannot drift apart.
var engines = []string{sqlstore.EngineSQLite, sqlstore.EnginePostgres}

// openSQL opens a store on a database of its own: a fresh PostgreSQL
// database (dropped afterwards) or a SQLite file in a temporary directory.
// It does not migrate.
func openSQL(t *testing.T, engine string) *sqlstore.SQL {
	t.Helper()
	var url, dir string
	switch engine {
	case sqlstore.EnginePostgres:
		url = sqltest.Postgres(t)
	case sqlstore.EngineSQLite:
		dir = t.TempDir()
	default:
		t.Fatalf("unknown engine %q", engine)
	}
	s, err := sqlstore.Open(t.Context(), url, dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", engine, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// forEachEngine runs test as one subtest per engine against a freshly
// migrated store.
func forEachEngine(t *testing.T, test func(t *testing.T, s *sqlstore.SQL)) {
	t.Helper()
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			s := openSQL(t, engine)
			if err := s.Migrate(t.Context()); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			test(t, s)
		})
	}
}

func TestOpenSQLEngine(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			s := openSQL(t, engine)
			if got := s.Engine(); got != engine {
				t.Errorf("Engine() = %q, want %q", got, engine)
			}
			if err := s.Ping(t.Context()); err != nil {
				t.Errorf("Ping: %v", err)
			}
		})
	}
}

func TestOpenSQLiteCreatesDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")
	s, err := sqlstore.Open(t.Context(), "", dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, sqlstore.SQLiteFile)); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestOpenSQLRejects(t *testing.T) {
	tests := []struct {
		name, url, dir string
		notInError     string
	}{
		{name: "mysql url", url: "mysql://root:hunter2@localhost/otp", dir: t.TempDir(), notInError: "hunter2"},
		{name: "no scheme", url: "localhost:5432", dir: t.TempDir()},
		{name: "sqlite without data dir", url: "", dir: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := sqlstore.Open(t.Context(), tt.url, tt.dir)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q, %q) = nil error, want an error", tt.url, tt.dir)
			}
			if tt.notInError != "" && strings.Contains(err.Error(), tt.notInError) {
				t.Errorf("error %q leaks %q", err, tt.notInError)
			}
		})
	}
}
