package ops

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The audit actions of the ops desk (guard.Event.Action). They are stored
// in the audit trail and filtered on: never rename one.
const (
	ActionUnblock    = "ops.unblock"
	ActionDenyAdd    = "ops.deny.add"
	ActionDenyRemove = "ops.deny.remove"
	ActionLogin      = "ops.login"
	// ActionAPIKeys summarises wrong API keys: one event when an address
	// spends the limit's (OutcomeLockedOut).
	ActionAPIKeys = "api.keys"
)

// The outcomes of the ops desk's actions (guard.Event.Outcome).
const (
	OutcomeUnblocked = "unblocked"  // ops.unblock
	OutcomeAdded     = "added"      // ops.deny.add
	OutcomeRemoved   = "removed"    // ops.deny.remove
	OutcomeOK        = "ok"         // ops.login: signed in
	OutcomeFailed    = "failed"     // ops.login: a wrong key or password
	OutcomeLockedOut = "locked_out" // api.keys: the address is refused until the window ends
)

// Limits on one page of events: a page is what an ops screen shows, and an
// unbounded query on a large audit table would stall the store for everyone.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
)

// EventFilter selects events. Zero fields do not filter.
type EventFilter struct {
	Phone  string
	Action string
	// RequestID selects the events of one request (its X-Request-Id).
	RequestID string
	// Service selects the events of one Verify service (its SID): its
	// sends, checks, cancels and approvals.
	Service string
	// DefaultService selects the events that name no service: the
	// default service's (the /otp API's, and a service marked default),
	// with the desk's own and the delivery reports, which name none
	// either. Not with Service.
	DefaultService bool
	// Outcome, Country (ISO region) and PhonePrefix (+ and digits: the
	// numbers that start with it) narrow the list further (the ops page's
	// event filter).
	Outcome     string
	Country     string
	PhonePrefix string
	Since       time.Time // inclusive
	Until       time.Time // exclusive
	// Limit is the page size: 0 means DefaultEventLimit, larger than
	// MaxEventLimit means MaxEventLimit.
	Limit int
	// BeforeID pages backwards: only events with ID < BeforeID. Pass the
	// last ID of the previous page. IDs, not times, are the cursor because
	// many events share a millisecond.
	BeforeID int64
}

// AuditLog records what otpguard decided and what ops people did.
type AuditLog interface {
	// WriteEvents stores the events all together or not at all. A zero At
	// becomes now. An event whose UID is stored already is not stored
	// again, so a batch may be retried after any error.
	WriteEvents(ctx context.Context, events []guard.Event) error
	// ListEvents returns matching events, newest (highest ID) first.
	ListEvents(ctx context.Context, f EventFilter) ([]guard.Event, error)
	// PruneEvents deletes events older than before and says how many.
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
}

// Retention is what RunRetention keeps in bounds: old audit events, and
// deny-list entries that expired long ago. Expired entries are kept a
// while (they say who blocked what), but the conversion watch adds them
// all the time and every instance reads the list every few seconds.
type Retention interface {
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
	// PruneExpiredDeny deletes deny-list entries that expired before
	// before and says how many.
	PruneExpiredDeny(ctx context.Context, before time.Time) (int64, error)
}

// Defaults of an AuditQueue.
const (
	DefaultAuditQueueSize = 10000
	DefaultAuditBatch     = 500
	// DefaultAuditRetention is how long events are kept: 30 days.
	DefaultAuditRetention = 30 * 24 * time.Hour
)

// Timing of the writer. The write timeout bounds one batch so a hung
// database turns into a retry, never a stuck writer; the back-off grows
// from auditRetryMin to auditRetryMax while the database stays down.
const (
	auditWriteTimeout = 5 * time.Second
	auditRetryMin     = 100 * time.Millisecond
	auditRetryMax     = 5 * time.Second
)

// AuditQueueOptions tune an AuditQueue.
type AuditQueueOptions struct {
	Size   int // events waiting at most; DefaultAuditQueueSize when 0
	Batch  int // events per write at most; DefaultAuditBatch when 0
	Logger *slog.Logger
	// OnDrop, when set, is told of every event lost: to a full queue, or
	// left unwritten when Close gave up.
	OnDrop func()
	// OnWrite, when set, is told of every batch written: n events now
	// stored, each told once (a retried batch is told when it succeeds,
	// never for an attempt that failed, whose commit may have landed).
	OnWrite func(n int)
	// Linger is how long the writer waits after an event for more to
	// join its batch (at most Batch); 0 writes at once. A transaction
	// costs the database far more than a row, so at a few sends per
	// millisecond one write per event spends most of the writer's CPU on
	// commits; Linger makes it one per Linger. The events are in the
	// trail that much later.
	Linger time.Duration
}

// AuditQueue takes audit events off the request path: Record puts an event
// in a bounded queue and returns at once; Run writes batches to the
// AuditLog. While the database is down the events wait, and the batch in
// hand is retried with back-off until it returns. A full queue drops the
// new event, counts it (OnDrop) and logs it once per overflow. It
// implements guard.EventSink.
type AuditQueue struct {
	log     AuditLog
	ch      chan guard.Event
	batch   int
	logger  *slog.Logger
	onDrop  func()
	onWrite func(int)
	linger  time.Duration

	dropped    atomic.Int64
	overflowed atomic.Bool // an overflow was logged and has not ended yet

	// pending is the batch the writer holds (taken from ch, not yet
	// written). Only the writer touches it and failing: Run, then Close,
	// never both at once. inHand mirrors len(pending) for Len.
	pending []guard.Event
	failing bool
	inHand  atomic.Int64
}

var _ guard.EventSink = (*AuditQueue)(nil)

// NewAuditQueue returns a queue writing to log. Start Run in a goroutine.
func NewAuditQueue(log AuditLog, o AuditQueueOptions) *AuditQueue {
	if o.Size <= 0 {
		o.Size = DefaultAuditQueueSize
	}
	if o.Batch <= 0 {
		o.Batch = DefaultAuditBatch
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnDrop == nil {
		o.OnDrop = func() {}
	}
	if o.OnWrite == nil {
		o.OnWrite = func(int) {}
	}
	return &AuditQueue{
		log: log, ch: make(chan guard.Event, o.Size), batch: o.Batch,
		logger: o.Logger, onDrop: o.OnDrop, onWrite: o.OnWrite, linger: max(0, o.Linger),
	}
}

// Record queues e without blocking. A zero At becomes now, so that an event
// written late still says when it happened; an empty UID gets one, so that
// however often its batch is retried it is stored once.
func (q *AuditQueue) Record(e guard.Event) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.UID == "" {
		e.UID = guard.NewEventUID()
	}
	select {
	case q.ch <- e:
	default:
		q.dropped.Add(1)
		q.onDrop()
		if q.overflowed.CompareAndSwap(false, true) {
			q.logger.Error("audit queue is full: dropping audit events until the database catches up",
				"capacity", cap(q.ch), "dropped_total", q.dropped.Load())
		}
	}
}

// Len is the number of events waiting, the batch in hand included.
func (q *AuditQueue) Len() int {
	return len(q.ch) + int(q.inHand.Load())
}

// Dropped is the number of events lost since start: to a full queue, or
// at Close.
func (q *AuditQueue) Dropped() int64 { return q.dropped.Load() }

// Run writes queued events until ctx is cancelled. Call Close afterwards
// to write what is left.
func (q *AuditQueue) Run(ctx context.Context) {
	backoff := auditRetryMin
	for {
		if len(q.pending) == 0 {
			select {
			case <-ctx.Done():
				return
			case e := <-q.ch:
				q.pending = append(q.pending, e)
				q.inHand.Store(1)
				q.gather(ctx)
			}
		}
		// A write under way at shutdown finishes (within its own timeout).
		if err := q.writeOnce(context.WithoutCancel(ctx)); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, auditRetryMax)
			continue
		}
		backoff = auditRetryMin
	}
}

// gather waits up to the linger for more events to join the batch in
// hand, until it is full or ctx ends.
func (q *AuditQueue) gather(ctx context.Context) {
	if q.linger <= 0 {
		return
	}
	t := time.NewTimer(q.linger)
	defer t.Stop()
	for len(q.pending) < q.batch {
		select {
		case e := <-q.ch:
			q.pending = append(q.pending, e)
			q.inHand.Store(int64(len(q.pending)))
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// writeOnce tops the batch in hand up from the queue and writes it. On
// failure the batch stays in hand for the next try. A write that timed out
// may have committed; its retry stores nothing twice, since every event
// carries its UID (Record) and the log skips a UID it holds. So the events
// are counted (OnWrite) when a write succeeds: each once, as stored.
func (q *AuditQueue) writeOnce(ctx context.Context) error {
	defer func() { q.inHand.Store(int64(len(q.pending))) }()
fill:
	for len(q.pending) < q.batch {
		select {
		case e := <-q.ch:
			q.pending = append(q.pending, e)
		default:
			break fill
		}
	}
	if len(q.pending) == 0 {
		return nil
	}
	q.inHand.Store(int64(len(q.pending))) // Len stays true while the write waits
	wctx, cancel := context.WithTimeout(ctx, auditWriteTimeout)
	defer cancel()
	if err := q.log.WriteEvents(wctx, q.pending); err != nil {
		if !q.failing {
			q.failing = true
			q.logger.Warn("writing audit events failed; they wait in the queue and are retried",
				"waiting", len(q.ch)+len(q.pending), "err", err)
		}
		return err
	}
	n := len(q.pending)
	q.onWrite(n)
	q.pending = q.pending[:0]
	if q.failing {
		q.failing = false
		q.logger.Info("audit events are written again", "waiting", len(q.ch))
	}
	if q.overflowed.Load() && len(q.ch) < cap(q.ch)/2 {
		q.overflowed.Store(false)
		q.logger.Info("audit queue has room again", "dropped_total", q.dropped.Load())
	}
	return nil
}

// Close writes every event still waiting, retrying until ctx ends; what is
// left then is lost: logged, counted as dropped (OnDrop, Dropped) and
// returned. Call it after Run has returned.
func (q *AuditQueue) Close(ctx context.Context) (lost int) {
	backoff := auditRetryMin
	for q.Len() > 0 {
		if ctx.Err() == nil {
			if err := q.writeOnce(ctx); err == nil {
				continue
			}
		}
		select {
		case <-ctx.Done():
			lost = q.Len()
			q.pending = q.pending[:0]
			q.inHand.Store(0)
			for len(q.ch) > 0 {
				<-q.ch
			}
			q.dropped.Add(int64(lost))
			for range lost {
				q.onDrop()
			}
			q.logger.Error("audit events lost at shutdown: the database did not take them in time",
				"lost", lost, "dropped_total", q.dropped.Load())
			return lost
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, auditRetryMax)
	}
	return 0
}

// RunRetention deletes the audit events and the expired deny-list entries
// older than retention, now and then every interval, until ctx is
// cancelled.
func RunRetention(ctx context.Context, r Retention, retention, interval time.Duration, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	prune := func() {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		before := time.Now().Add(-retention)
		for _, p := range []struct {
			what string
			run  func(context.Context, time.Time) (int64, error)
		}{{"audit events", r.PruneEvents}, {"expired deny-list entries", r.PruneExpiredDeny}} {
			n, err := p.run(pctx, before)
			switch {
			case err != nil:
				logger.Warn("retention failed; it runs again later", "what", p.what, "deleted", n, "err", err)
			case n > 0:
				logger.Info("retention deleted old rows", "what", p.what, "deleted", n, "before", before.UTC())
			}
		}
	}
	prune()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			prune()
		}
	}
}
