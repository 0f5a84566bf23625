package sqlstore

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// benchPrefill is how many events the audit table holds before a
// benchmark writes: the trail keeps 30 days, so its random indexes (phone,
// request ID, UID) are far larger than SQLite's page cache, and an insert
// lands on a leaf page of its own. On an empty table every insert would
// hit the same few cached pages and the commit would write only those.
const benchPrefill = 300_000

// BenchmarkWriteEvents is the audit writer's work for the sends of one
// instance: batches of realistic otp.send events (as guard records them:
// E.164 number, region, address, request ID, a UID made at Record) written
// by WriteEvents to a SQLite file already holding benchPrefill events. An
// op is one event; batch is how many the AuditQueue hands over at once
// (about 80 per 20 ms linger at 4,000 sends/s).
//
//	OTPGUARD_REQUIRE_SERVICES=1 go test -run '^$' -bench WriteEvents -benchtime 80000x -count 3 ./internal/sqlstore/
//
// cpu-us/event is this process's CPU (user + system, getrusage) per event
// written, the commits, WAL checkpoints (the last one at the end of the
// run) and garbage collection included. ns/op is wall time, waits on
// fsync included; allocs/op are an event's.
//
// batch=80 is the writer as it is; each other case changes one thing
// (a longer linger's bigger batch, a bigger page cache, synchronous
// NORMAL, a shorter checkpoint interval), to weigh it against the writer
// in one run. The writer keeps its settings because none of them pays
// for what it costs: a trail written later, a cache that must grow with
// the table, or commits an OS crash would lose.
func BenchmarkWriteEvents(b *testing.B) {
	template := benchTemplate(b)
	for _, c := range []struct {
		name   string
		batch  int
		pragma string // run once on the store's only connection
	}{
		{"batch=80", 80, ""},
		{"batch=400", 400, ""},
		{"sync=normal", 80, "PRAGMA synchronous=NORMAL"},
		{"autocheckpoint=1000", 80, "PRAGMA wal_autocheckpoint=1000"},
		{"batch=400+cache=16MiB", 400, "PRAGMA cache_size=-16384"},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := openBenchCopy(b, template)
			if c.pragma != "" {
				if _, err := s.db.Exec(c.pragma); err != nil {
					b.Fatal(err)
				}
			}
			events := benchEvents(b.N, time.Now())
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for start := 0; start < len(events); start += c.batch {
				if err := s.WriteEvents(context.Background(), events[start:min(start+c.batch, len(events))]); err != nil {
					b.Fatal(err)
				}
			}
			// What the WAL holds is still to be copied into the file: a case
			// that checkpoints less often would otherwise leave its work
			// out of the count.
			if _, err := s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(events)), "cpu-us/event")
		})
	}
}

// benchEvents are n otp.send events a millisecond apart from at: mostly
// sent, some refused, each to a number of its own, as a send's record
// makes them (no actor; no trace ID, tracing being off by default).
func benchEvents(n int, at time.Time) []guard.Event {
	r := rand.New(rand.NewPCG(uint64(at.UnixNano()), 26))
	events := make([]guard.Event, n)
	for i := range events {
		outcome := guard.OutcomeSent
		if r.IntN(10) == 0 {
			outcome = "phone_rate_limited"
		}
		events[i] = guard.Event{
			At: at.Add(time.Duration(i) * time.Millisecond), Action: guard.ActionOTPSend, Outcome: outcome,
			Phone: fmt.Sprintf("+9198%08d", r.IntN(1e8)), Country: "IN", IP: fmt.Sprintf("203.0.113.%d", r.IntN(256)),
			RequestID: fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()), UID: guard.NewEventUID(),
		}
	}
	return events
}

// benchTemplate is a migrated SQLite file holding benchPrefill events, made
// once per run of the benchmark and copied by each case.
func benchTemplate(b *testing.B) string {
	dir := b.TempDir()
	s, err := Open(context.Background(), "", dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	// A cache the size of the file, so that making it takes seconds.
	if _, err := s.db.Exec("PRAGMA cache_size=-262144"); err != nil {
		b.Fatal(err)
	}
	// Generated in SQL: writing them through WriteEvents would take the
	// benchmark's own time several times over.
	_, err = s.db.ExecContext(context.Background(), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO audit_events (`+eventColumns+`)
		SELECT ? + i, 'otp.send', CASE WHEN i % 10 = 0 THEN 'phone_rate_limited' ELSE 'sent' END,
			'+9198' || printf('%08d', abs(random()) % 100000000), 'IN', '203.0.113.' || (abs(random()) % 256), '', '', '',
			lower(hex(randomblob(16))), lower(hex(randomblob(16))), ''
		FROM n`, benchPrefill, time.Now().Add(-24*time.Hour).UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil { // checkpoints the WAL into the file
		b.Fatal(err)
	}
	return filepath.Join(dir, SQLiteFile)
}

// openBenchCopy opens a copy of the template in a directory of its own.
func openBenchCopy(b *testing.B, template string) *SQL {
	dir := b.TempDir()
	src, err := os.Open(template)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, SQLiteFile))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
	s, err := Open(context.Background(), "", dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// processCPU is the user and system CPU this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
