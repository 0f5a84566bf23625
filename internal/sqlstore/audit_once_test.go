package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// countEvents is how many rows the audit table holds.
func countEvents(t *testing.T, s *sqlstore.SQL) int {
	t.Helper()
	return len(listEvents(t, s, ops.EventFilter{Limit: ops.MaxEventLimit}))
}

// A batch written again (the retry of a write whose commit landed but
// whose answer was lost) stores none of its events twice, on either
// engine, and an event written with no UID is given one.
func TestSQLWriteEventsRetriedStoresOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		batch := make([]guard.Event, 5)
		for i := range batch {
			batch[i] = guard.Event{At: t0, Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent,
				Phone: fmt.Sprintf("+1415555%04d", i), UID: guard.NewEventUID()}
		}
		writeEvents(t, s, batch)
		writeEvents(t, s, batch) // the retry
		more := append([]guard.Event{batch[4]}, guard.Event{At: t0, Action: guard.ActionOTPVerify, UID: guard.NewEventUID()})
		writeEvents(t, s, more)
		writeEvents(t, s, []guard.Event{{At: t0, Action: ops.ActionLogin}}) // no UID

		got := listEvents(t, s, ops.EventFilter{Limit: ops.MaxEventLimit})
		if len(got) != 7 {
			t.Fatalf("rows after writing 7 events, some several times: %d, want 7", len(got))
		}
		seen := map[string]bool{}
		for _, e := range got {
			if len(e.UID) != 32 || seen[e.UID] {
				t.Errorf("event %d (%s): UID %q, want 32 hex digits seen once", e.ID, e.Action, e.UID)
			}
			seen[e.UID] = true
		}
		for _, e := range batch {
			if !seen[e.UID] {
				t.Errorf("event %s was not stored", e.UID)
			}
		}
	})
}

// lostAnswers is an audit log whose first `lose` writes commit and then
// fail, as a write does whose COMMIT reached the database and whose answer
// did not reach otpguard within the timeout.
type lostAnswers struct {
	*sqlstore.SQL
	lose   atomic.Int32
	failed atomic.Int32
}

func (l *lostAnswers) WriteEvents(ctx context.Context, events []guard.Event) error {
	if err := l.SQL.WriteEvents(ctx, events); err != nil {
		return err
	}
	if l.lose.Add(-1) >= 0 {
		l.failed.Add(1)
		return errors.New("write events: context deadline exceeded (the commit landed)")
	}
	return nil
}

// The audit queue retries a batch whose answer was lost after its commit:
// each event is still stored once, and the written counter equals the
// rows, however many times the batch is retried.
func TestAuditQueueRetryAfterLostAnswerStoresOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		log := &lostAnswers{SQL: s}
		log.lose.Store(3)
		var written atomic.Int64
		q := ops.NewAuditQueue(log, ops.AuditQueueOptions{Batch: 4, OnWrite: func(n int) { written.Add(int64(n)) }})
		for i := range 10 {
			q.Record(guard.Event{Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent, Phone: fmt.Sprintf("+1415555%04d", i)})
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); q.Run(ctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for q.Len() > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		<-done
		if q.Len() != 0 {
			t.Fatalf("events still waiting: %d", q.Len())
		}
		if log.failed.Load() != 3 {
			t.Fatalf("writes that committed and failed: %d, want 3", log.failed.Load())
		}
		if rows := countEvents(t, s); rows != 10 || written.Load() != int64(rows) {
			t.Errorf("10 events, 3 retried writes: %d rows, written counter %d; want 10 and 10", rows, written.Load())
		}
	})
}

// A call made after its request's database deadline has passed fails at
// once on either engine, without waiting for its own timeout.
func TestSQLCallAfterRequestDeadlineFails(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx := ops.WithDatabaseDeadline(t.Context(), time.Now().Add(-time.Millisecond))
		if _, err := s.ListDeny(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ListDeny past the request's deadline: %v, want context.DeadlineExceeded", err)
		}
		if err := s.WriteEvents(ctx, []guard.Event{{Action: guard.ActionOTPSend, UID: guard.NewEventUID()}}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WriteEvents past the request's deadline: %v, want context.DeadlineExceeded", err)
		}
		if n := countEvents(t, s); n != 0 {
			t.Errorf("rows: %d, want 0", n)
		}
	})
}
