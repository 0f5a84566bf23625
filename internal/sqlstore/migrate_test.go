package sqlstore_test

import (
	"errors"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/sqlstore/sqltest"
)

func TestSQLMigrations(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			ctx := t.Context()
			s := openSQL(t, engine)

			wantStatus := func(step string, wantApplied bool) {
				t.Helper()
				st, err := s.MigrationStatus(ctx)
				if err != nil {
					t.Fatalf("%s: MigrationStatus: %v", step, err)
				}
				if len(st) == 0 {
					t.Fatalf("%s: MigrationStatus returned no migrations", step)
				}
				if st[0].Version != 1 || st[0].Name != "00001_init.sql" {
					t.Errorf("%s: first migration = %d %q, want 1 \"00001_init.sql\"", step, st[0].Version, st[0].Name)
				}
				for _, m := range st {
					if m.Applied != wantApplied {
						t.Errorf("%s: %s applied = %v, want %v", step, m.Name, m.Applied, wantApplied)
					}
					if m.Applied == m.AppliedAt.IsZero() {
						t.Errorf("%s: %s applied = %v but AppliedAt = %v", step, m.Name, m.Applied, m.AppliedAt)
					}
				}
			}
			wantSchema := func(step string, wantOutdated bool) {
				t.Helper()
				err := s.CheckSchema(ctx)
				if got := errors.Is(err, sqlstore.ErrSchemaOutdated); got != wantOutdated {
					t.Fatalf("%s: CheckSchema() = %v, want outdated = %v", step, err, wantOutdated)
				}
				if !wantOutdated && err != nil {
					t.Fatalf("%s: CheckSchema() = %v, want nil", step, err)
				}
			}
			// The tables exist exactly when the schema is up: prove it by use.
			wantTables := func(step string, want bool) {
				t.Helper()
				_, err := s.ListEvents(ctx, ops.EventFilter{})
				if got := err == nil; got != want {
					t.Fatalf("%s: ListEvents error = %v, want tables present = %v", step, err, want)
				}
			}

			wantStatus("fresh", false)
			wantSchema("fresh", true)
			wantTables("fresh", false)

			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			wantStatus("after up", true)
			wantSchema("after up", false)
			wantTables("after up", true)

			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("second Migrate on an up-to-date schema: %v", err)
			}

			// Down one step at a time: the newest goes first, and the schema
			// is outdated from the first step on.
			st, err := s.MigrationStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := len(st) - 1; i >= 0; i-- {
				if err := s.MigrateDown(ctx); err != nil {
					t.Fatalf("MigrateDown from %s: %v", st[i].Name, err)
				}
				now, err := s.MigrationStatus(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for j, m := range now {
					if m.Applied != (j < i) {
						t.Errorf("after rolling back %s: %s applied = %v, want %v", st[i].Name, m.Name, m.Applied, j < i)
					}
				}
				wantSchema("after down from "+st[i].Name, true)
			}
			wantStatus("after down", false)
			wantTables("after down", false)

			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("Migrate after down: %v", err)
			}
			wantStatus("after up again", true)
			wantSchema("after up again", false)
			if err := s.WriteEvents(ctx, []guard.Event{{Action: "otp.send", Outcome: "sent"}}); err != nil {
				t.Fatalf("WriteEvents after up again: %v", err)
			}
		})
	}
}

// Instances started together with auto-migrate all call Migrate; each
// migration must still be applied exactly once and none may fail.
func TestSQLMigrateConcurrently(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			var url, dir string
			if engine == sqlstore.EnginePostgres {
				url = sqltest.Postgres(t)
			} else {
				dir = t.TempDir()
			}
			const instances = 4
			stores := make([]*sqlstore.SQL, instances)
			for i := range stores {
				s, err := sqlstore.Open(t.Context(), url, dir)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				stores[i] = s
			}
			errs := make(chan error, instances)
			for _, s := range stores {
				go func() { errs <- s.Migrate(t.Context()) }()
			}
			for range instances {
				if err := <-errs; err != nil {
					t.Errorf("concurrent Migrate: %v", err)
				}
			}
			for i, s := range stores {
				if err := s.CheckSchema(t.Context()); err != nil {
					t.Errorf("instance %d: CheckSchema after concurrent Migrate: %v", i, err)
				}
			}
		})
	}
}
