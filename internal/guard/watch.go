package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// The conversion watch off the request path. A send or a verify decides
// nothing through the watch: it only feeds the tallies that may later
// block a prefix. So the request puts its event in a bounded queue and
// answers; one goroutine per OTP service drains the queue in batches and
// counts the events of a whole batch in one round trip (ConversionBatcher;
// one call per event otherwise), then judges each send's tallies and raises
// the alerts. The watch's store calls still go
// through the Fallback's breaker (app's guardedStore): while it is open the
// drain makes no Redis call.
//
// A full queue drops the new event and counts it (WatchDropped, exported
// as otpguard_conversion_watch_dropped_total): the watch sees a little
// less, and no request ever waits on it. Close drains what is queued;
// Flush waits until what was queued before it has been counted and judged
// (tests, and shutdown).

// Defaults of the watch queue.
const (
	DefaultWatchQueue = 4096 // events waiting at most
	watchBatch        = 64   // events counted in one round trip at most
	// watchLinger is how long the drainer waits after an event for more to
	// join its batch (a Flush or Close cuts it short), so that a busy
	// service makes one round trip per linger rather than one per send.
	// The watch's windows are minutes: its judgement is that much later.
	watchLinger = 10 * time.Millisecond
)

// ConversionCount is one event of the conversion watch in a batch: kind at
// now, for each of subjects.
type ConversionCount struct {
	Kind     ConversionKind
	Now      time.Time
	Subjects []limit.Key
}

// ConversionBatcher is a Conversions that counts many events in one round
// trip. Events are counted in order, each as CountConversion counts it;
// the answer holds, per event, each subject's tally after that event.
type ConversionBatcher interface {
	CountConversions(ctx context.Context, window, delay time.Duration, counts []ConversionCount) ([][]Tally, error)
}

// watchEvent is one queued event; done, when set, marks a Flush (no event).
type watchEvent struct {
	ctx   context.Context // the request's values (logs), never its cancellation
	kind  ConversionKind
	phone Phone
	// solved: a solved send's event, or its verify's (challenge.go)
	solved bool
	at     time.Time
	done   chan struct{}
}

// watchQueue is the bounded queue and its one drainer.
type watchQueue struct {
	ch      chan watchEvent
	quit    chan struct{}
	stopped chan struct{}
	once    sync.Once

	dropped    atomic.Int64
	overflowed atomic.Bool // an overflow was logged and has not ended yet
}

func newWatchQueue(size int) *watchQueue {
	if size <= 0 {
		size = DefaultWatchQueue
	}
	return &watchQueue{ch: make(chan watchEvent, size), quit: make(chan struct{}), stopped: make(chan struct{})}
}

// watching reports whether the conversion watch applies to phone now.
func (s *conversionWatch) watching(ctx context.Context, phone Phone) bool {
	m := s.policy.Mode
	if s.conv == nil || m == "" || m == ConversionOff || !s.safe.creditable(phone) {
		return false
	}
	// The store already failed in this decision: do not wait on it again.
	return !limit.StoreFailed(ctx)
}

// enqueue puts the event of a request that counts for the watch in the
// queue, or drops it when the queue is full.
func (s *conversionWatch) enqueue(ctx context.Context, phone Phone, kind ConversionKind, solved bool) {
	if !s.watching(ctx, phone) {
		return
	}
	q := s.q
	select {
	case <-q.stopped: // closed: nobody drains the queue any more
	default:
		select {
		case q.ch <- watchEvent{ctx: context.WithoutCancel(ctx), kind: kind, phone: phone, solved: solved, at: s.now()}:
			return
		default:
		}
	}
	q.dropped.Add(1)
	if !q.overflowed.Swap(true) {
		s.log.WarnContext(ctx, "conversion watch: queue full, dropping events (counted in otpguard_conversion_watch_dropped_total)",
			"queue", cap(q.ch))
	}
}

// run drains the queue until Close, then drains what is left.
func (s *conversionWatch) run() {
	q := s.q
	defer close(q.stopped)
	batch := make([]watchEvent, 0, watchBatch)
	for {
		select {
		case e := <-q.ch:
			batch = append(batch[:0], e)
		case <-q.quit:
			for {
				batch = batch[:0]
			more:
				for len(batch) < watchBatch {
					select {
					case e := <-q.ch:
						batch = append(batch, e)
					default:
						break more
					}
				}
				if len(batch) == 0 {
					return
				}
				s.batch(batch)
			}
		}
		s.batch(q.gather(batch))
	}
}

// gather waits up to watchLinger for more events to join batch, until it
// is full, a Flush's mark joins it (its caller waits) or Close.
func (q *watchQueue) gather(batch []watchEvent) []watchEvent {
	if batch[len(batch)-1].done != nil {
		return batch
	}
	t := time.NewTimer(watchLinger)
	defer t.Stop()
	for len(batch) < watchBatch {
		select {
		case e := <-q.ch:
			batch = append(batch, e)
			if e.done != nil {
				return batch
			}
		case <-t.C:
			return batch
		case <-q.quit:
			return batch
		}
	}
	return batch
}

// batch counts a batch's events and judges its sends, in order.
func (s *conversionWatch) batch(batch []watchEvent) {
	var events []watchEvent
	counts := make([]ConversionCount, 0, len(batch))
	for _, e := range batch {
		if e.done == nil {
			events = append(events, e)
			counts = append(counts, ConversionCount{Kind: e.kind, Now: e.at, Subjects: s.conversionSubjects(e.phone, e.solved)})
		}
	}
	if len(events) > 0 {
		tallies, err := s.countConversions(counts)
		if err != nil {
			s.log.WarnContext(events[0].ctx, "conversion watch: counting failed", "events", len(events), "err", err)
		} else {
			normals := map[string]float64{}
			for i, e := range events {
				if e.kind != ConversionSend {
					continue
				}
				for j, t := range tallies[i] {
					if th := s.convThreshold(e, t, normals); t.Sends >= s.policy.MinSends && t.Rate() < th.rate {
						s.conversionAlert(e.ctx, e.phone, counts[i].Subjects[j], t, th)
					}
				}
			}
		}
		s.q.overflowed.Store(false)
	}
	for _, e := range batch {
		if e.done != nil {
			close(e.done)
		}
	}
}

// countConversions counts the events in one round trip when the store can
// batch them, one call each otherwise.
func (s *conversionWatch) countConversions(counts []ConversionCount) ([][]Tally, error) {
	ctx, cancel := context.WithTimeout(context.Background(), convTimeout)
	defer cancel()
	w, d := ConversionWindow, s.policy.Delay
	var out [][]Tally
	if b, ok := s.conv.(ConversionBatcher); ok {
		var err error
		if out, err = b.CountConversions(ctx, w, d, counts); err != nil {
			return nil, err
		}
		if len(out) != len(counts) {
			return nil, fmt.Errorf("conversion: store answered %d events for %d", len(out), len(counts))
		}
	} else {
		out = make([][]Tally, len(counts))
		for i, c := range counts {
			t, err := s.conv.CountConversion(ctx, c.Kind, c.Now, w, d, c.Subjects)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
	}
	for i, c := range counts {
		if len(out[i]) != len(c.Subjects) {
			return nil, fmt.Errorf("conversion: store answered %d tallies for %d subjects", len(out[i]), len(c.Subjects))
		}
	}
	return out, nil
}

// queued is how many events wait in the queue.
func (s *conversionWatch) queued() int {
	if s.q == nil {
		return 0
	}
	return len(s.q.ch)
}

// flush waits until every event queued before it was counted and judged
// (its alerts raised), or ctx ends. Without a queue it returns at once.
func (s *conversionWatch) flush(ctx context.Context) error {
	if s.q == nil {
		return nil
	}
	done := make(chan struct{})
	select {
	case s.q.ch <- watchEvent{done: done}:
	case <-s.q.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-s.q.stopped: // closed meanwhile: close drained it
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close drains the queue (counting and judging what is in it) and stops
// its goroutine. Events queued after close are dropped. Safe to call more
// than once.
func (s *conversionWatch) close() {
	if s.q == nil {
		return
	}
	s.q.once.Do(func() { close(s.q.quit) })
	<-s.q.stopped
}

// dropped is how many events a full queue dropped.
func (s *conversionWatch) dropped() int64 {
	if s.q == nil {
		return 0
	}
	return s.q.dropped.Load()
}
