package ops_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// fakeAudit is an ops.AuditLog whose WriteEvents fails while down is set.
type fakeAudit struct {
	mu         sync.Mutex
	down       bool
	written    []guard.Event
	batches    int
	fails      int
	pruned     []time.Time
	denyPruned []time.Time
	list       func(f ops.EventFilter) ([]guard.Event, error)
}

func (f *fakeAudit) WriteEvents(_ context.Context, events []guard.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		f.fails++
		return errors.New("database down")
	}
	f.written = append(f.written, events...)
	f.batches++
	return nil
}

func (f *fakeAudit) ListEvents(_ context.Context, filter ops.EventFilter) ([]guard.Event, error) {
	return f.list(filter)
}

func (f *fakeAudit) PruneEvents(_ context.Context, before time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned = append(f.pruned, before)
	return 0, nil
}

func (f *fakeAudit) PruneExpiredDeny(_ context.Context, before time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denyPruned = append(f.denyPruned, before)
	return 0, nil
}

func (f *fakeAudit) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeAudit) snapshot() (written []guard.Event, fails int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]guard.Event(nil), f.written...), f.fails
}

// runQueue runs q until the test ends, then closes it.
func runQueue(t *testing.T, q *ops.AuditQueue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			q.Close(cctx)
		})
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func auditEvent(i int) guard.Event {
	return guard.Event{Action: "otp.send", Outcome: "sent", Detail: fmt.Sprint(i)}
}

func TestAuditQueueWritesInBatches(t *testing.T) {
	log := &fakeAudit{}
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{Batch: 10})
	for i := range 95 {
		q.Record(auditEvent(i))
	}
	runQueue(t, q)
	eventually(t, "95 events written", func() bool { w, _ := log.snapshot(); return len(w) == 95 })
	w, _ := log.snapshot()
	for i, e := range w {
		if e.Detail != fmt.Sprint(i) {
			t.Fatalf("event %d: got %q, want them in the order recorded", i, e.Detail)
		}
		if e.At.IsZero() {
			t.Fatalf("event %d has no time: Record must stamp it", i)
		}
	}
	if log.batches < 10 {
		t.Errorf("95 events in %d batches of at most 10", log.batches)
	}
}

// TestAuditQueueWaitsForDatabase: while the database is down, Record
// returns at once and the events wait; when it returns, all are written.
func TestAuditQueueWaitsForDatabase(t *testing.T) {
	log := &fakeAudit{down: true}
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{})
	runQueue(t, q)
	// Record must not wait for the database: if it did, these would never
	// return while it is down.
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := range 1000 {
			q.Record(auditEvent(i))
		}
	}()
	eventually(t, "1000 Records with the database down to return", func() bool {
		select {
		case <-recorded:
			return true
		default:
			return false
		}
	})
	eventually(t, "a failed write", func() bool { _, f := log.snapshot(); return f >= 2 })
	if w, _ := log.snapshot(); len(w) != 0 {
		t.Fatalf("written while down: %d", len(w))
	}
	if got := q.Len(); got != 1000 {
		t.Errorf("Len while down: got %d, want 1000", got)
	}
	log.setDown(false)
	eventually(t, "1000 events written after the database returned", func() bool { w, _ := log.snapshot(); return len(w) == 1000 })
	if q.Dropped() != 0 {
		t.Errorf("Dropped: got %d, want 0", q.Dropped())
	}
}

func TestAuditQueueOverflowIsCountedAndLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	log := &fakeAudit{down: true}
	drops := 0
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{Size: 5, Logger: logger, OnDrop: func() { drops++ }})
	for i := range 12 { // no writer running: the queue holds 5
		q.Record(auditEvent(i))
	}
	if q.Dropped() != 7 || drops != 7 {
		t.Errorf("dropped: got %d (OnDrop %d), want 7", q.Dropped(), drops)
	}
	if n := strings.Count(logs.String(), "audit queue is full"); n != 1 {
		t.Errorf("overflow logged %d times, want once:\n%s", n, logs.String())
	}
	log.setDown(false)
	runQueue(t, q)
	eventually(t, "the 5 queued events written", func() bool { w, _ := log.snapshot(); return len(w) == 5 })
}

func TestAuditQueueCloseFlushes(t *testing.T) {
	log := &fakeAudit{}
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{})
	stop := runQueue(t, q)
	stop() // Run has returned; Close must write what is recorded next
	for i := range 3 {
		q.Record(auditEvent(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q.Close(ctx)
	if w, _ := log.snapshot(); len(w) != 3 {
		t.Errorf("after Close: %d written, want 3", len(w))
	}
}

// TestAuditQueueCloseGivesUpInTime: Close retries while the database is
// down, and gives up, losing and logging what is left, when its context
// ends.
func TestAuditQueueCloseGivesUpInTime(t *testing.T) {
	var logs syncBuffer
	log := &fakeAudit{down: true}
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q.Record(auditEvent(1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan struct{})
	go func() { defer close(closed); q.Close(ctx) }()
	eventually(t, "Close to retry the write", func() bool { _, f := log.snapshot(); return f >= 2 })
	cancel()
	eventually(t, "Close to give up once its context ended", func() bool {
		select {
		case <-closed:
			return true
		default:
			return false
		}
	})
	if !strings.Contains(logs.String(), "audit events lost at shutdown") || !strings.Contains(logs.String(), "lost=1") {
		t.Errorf("after Close gave up: %d waiting, log %q; want the 1 event lost and logged", q.Len(), logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger in another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestAuditQueueCloseCountsLost: what Close cannot write is counted as
// dropped (OnDrop feeds otpguard_audit_dropped_total) and returned, so that
// a loss at shutdown is never only a log line.
func TestAuditQueueCloseCountsLost(t *testing.T) {
	log := &fakeAudit{down: true}
	var drops int
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{OnDrop: func() { drops++ }})
	for i := range 4 {
		q.Record(auditEvent(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if lost := q.Close(ctx); lost != 4 {
		t.Errorf("Close returned %d lost, want 4", lost)
	}
	if drops != 4 || q.Dropped() != 4 || q.Len() != 0 {
		t.Errorf("after Close: OnDrop %d times, Dropped %d, Len %d; want 4, 4, 0", drops, q.Dropped(), q.Len())
	}
}

func TestRunRetention(t *testing.T) {
	log := &fakeAudit{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	started := time.Now()
	go func() { defer close(done); ops.RunRetention(ctx, log, 24*time.Hour, 20*time.Millisecond, nil) }()
	eventually(t, "3 prunes", func() bool { log.mu.Lock(); defer log.mu.Unlock(); return len(log.pruned) >= 3 })
	seen := time.Now()
	cancel()
	<-done
	log.mu.Lock()
	defer log.mu.Unlock()
	// The first prune ran between started and seen: it deleted what is 24h
	// older than that moment.
	if first := log.pruned[0]; first.Before(started.Add(-24*time.Hour)) || first.After(seen.Add(-24*time.Hour)) {
		t.Errorf("first prune deleted before %s, want 24h before it ran (between %s and %s)",
			first, started.Add(-24*time.Hour), seen.Add(-24*time.Hour))
	}
	if len(log.denyPruned) != len(log.pruned) || !log.denyPruned[0].Equal(log.pruned[0]) {
		t.Errorf("expired deny entries pruned %d times (first before %v), events %d times (%v): want each round to prune both alike",
			len(log.denyPruned), log.denyPruned, len(log.pruned), log.pruned[0])
	}
}
