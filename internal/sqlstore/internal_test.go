package sqlstore

import (
	"testing"

	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
)

func TestSQLRebind(t *testing.T) {
	tests := []struct {
		engine, in, want string
	}{
		{EnginePostgres, "SELECT 1", "SELECT 1"},
		{EnginePostgres, "a = ? AND b < ? LIMIT ?", "a = $1 AND b < $2 LIMIT $3"},
		{EnginePostgres, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"},
		{EngineSQLite, "a = ? AND b < ?", "a = ? AND b < ?"},
	}
	for _, tt := range tests {
		s := &SQL{engine: tt.engine}
		if got := s.rebind(tt.in); got != tt.want {
			t.Errorf("%s rebind(%q) = %q, want %q", tt.engine, tt.in, got, tt.want)
		}
	}
}

// The pragmas are what make the single SQLite file safe to share with a
// second process and to wait on instead of failing; a DSN typo would drop
// them silently.
func TestSQLitePragmas(t *testing.T) {
	s, err := Open(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	tests := []struct {
		pragma, want string
	}{
		{"journal_mode", "wal"},
		{"busy_timeout", "5000"},
		{"foreign_keys", "1"},
		{"temp_store", "2"},             // MEMORY: no write syscall per page of an audit batch's statement journal
		{"wal_autocheckpoint", "10000"}, // the audit batches' hot pages copied into the file once per 40 MB of WAL
	}
	for _, tt := range tests {
		var got string
		if err := s.db.QueryRowContext(t.Context(), "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s = %q, want %q", tt.pragma, got, tt.want)
		}
	}
	if got := s.db.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("SQLite MaxOpenConnections = %d, want 1", got)
	}
}

// The schema refuses a malformed pattern by itself, so that a row written
// around AddDeny (a manual INSERT, a future code path) cannot turn into a
// deny entry that blocks everything.
func TestSQLSchemaChecksPattern(t *testing.T) {
	for _, engine := range []string{EngineSQLite, EnginePostgres} {
		t.Run(engine, func(t *testing.T) {
			var url, dir string
			if engine == EnginePostgres {
				url = sqltest.Postgres(t)
			} else {
				dir = t.TempDir()
			}
			s, err := Open(t.Context(), url, dir)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			if err := s.Migrate(t.Context()); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			tests := []struct {
				pattern string
				ok      bool
			}{
				{"+1", true},
				{"+123456789012345", true},
				{"", false},
				{"+", false},
				{"1234", false},
				{"+12a4", false},
				{"+12 4", false},
				{"+1234567890123456", false},
			}
			for _, tt := range tests {
				_, err := s.db.ExecContext(t.Context(), s.rebind(
					`INSERT INTO deny_list (pattern, created_at) VALUES (?, 0)`), tt.pattern)
				if got := err == nil; got != tt.ok {
					t.Errorf("raw insert of pattern %q: error %v, want accepted = %v", tt.pattern, err, tt.ok)
				}
			}
		})
	}
}
