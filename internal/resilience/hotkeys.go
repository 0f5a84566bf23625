package resilience

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// Syncer adds deltas to hot keys and reads back their global state, in
// one round trip for all keys.
type Syncer interface {
	Sync(ctx context.Context, items []limit.SyncItem) ([]limit.SyncState, error)
}

// HotKeysOptions configure the local counters of sync-mode policies.
type HotKeysOptions struct {
	Store Syncer
	// Instances returns the number of live instances sharing the limits
	// (N); 1 when nil.
	Instances func() int
	Now       func() time.Time // time.Now when nil
	Logger    *slog.Logger
	// MaxKeys bounds the local table; keys beyond it are decided exactly
	// (in Redis) instead. Default 100,000.
	MaxKeys int
	// Batch bounds the keys sent in one round trip (default 500): a table
	// of 100,000 keys in one MULTI would outlast any timeout, and a batch
	// that failed is sent again whole.
	Batch int
	// Timeout bounds one batch's round trip (default 1s). It is longer than
	// a decision's timeout on purpose: no caller waits on a sync, and a
	// batch that times out may have counted and is then counted twice.
	Timeout time.Duration
}

// HotKeys decides sync-mode checks locally and syncs them with Redis every
// sync_interval: "local counters with periodic sync".
//
// Between syncs an instance spends at most its share of what was left
// globally at its last sync: floor(remaining / N), where a token bucket's
// remaining includes what refills during one interval (less any debt).
// Rounded down, the N shares never add up to more than what is left. At
// each sync it sends its unsent deltas (INCRBY for a window, the sync
// script for a bucket; a key with nothing to send is only read) and reads
// back the global remainder, Batch keys per round trip.
//
// Some checks of a sync-mode policy are not decided here (Decide says so)
// but by the Limiter's counter, in Redis or by the policy's on_store_error:
// every check while the last sync failed, and a check that costs more than
// this instance's share but not more than what is left for all (the last
// units of a window or bucket, when fewer than N are left and every share
// rounds down to 0).
//
// Overshoot: instances read the global total at slightly different times,
// so each may count on what others spent but have not yet sent. Per window
// (or per bucket refill), what all instances allow is at most
//
//	limit + A,  A = min(limit, what they allowed together in one sync interval)
//
// and it corrects itself: a window's overshoot ends with the window, a
// bucket's is a debt that its refill pays back first.
//
// A sync that fails keeps its deltas and sends them with the next one; a
// delta whose window has ended no longer matters and is discarded (counted
// in Discarded). A batch that timed out may still have counted: its deltas
// are sent again, so Redis may count them twice; errors are on the side of
// refusing. What a failed last sync at shutdown leaves unsent is counted
// in Lost.
type HotKeys struct {
	store     Syncer
	instances func() int
	now       func() time.Time
	log       *slog.Logger
	maxKeys   int
	batch     int
	timeout   time.Duration

	mu      sync.Mutex
	entries map[limit.Key]*hotEntry
	failing bool // the last sync failed: checks go to the Limiter's counter

	discarded atomic.Int64
	lost      atomic.Int64
}

type hotEntry struct {
	take     limit.Take // the template: key and policy, Cost 0
	interval time.Duration
	avail    int64     // what all instances may spend until the next sync, as of the last
	resetAt  time.Time // fixed window: when the current window ends
	share    int64     // what this instance may spend until the next sync
	spent    int64     // of share, since the last sync
	pending  []delta   // spent here, not yet in Redis; oldest first
	nextSync time.Time
	lastUsed time.Time
}

type delta struct {
	n  int64
	at time.Time
	// windowEnd is the end of the window the delta was spent in (fixed
	// windows); past it the delta no longer matters.
	windowEnd time.Time
}

// NewHotKeys returns an empty table.
func NewHotKeys(o HotKeysOptions) *HotKeys {
	h := &HotKeys{store: o.Store, instances: o.Instances, now: o.Now, log: o.Logger, maxKeys: o.MaxKeys,
		entries: map[limit.Key]*hotEntry{}}
	if h.instances == nil {
		h.instances = func() int { return 1 }
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxKeys <= 0 {
		h.maxKeys = 100_000
	}
	h.batch, h.timeout = o.Batch, o.Timeout
	if h.batch <= 0 {
		h.batch = 500
	}
	if h.timeout <= 0 {
		h.timeout = time.Second
	}
	return h
}

// Decide spends t.Cost locally. ok is false when the caller must decide
// the check as an exact one, through its counter:
//   - the table is full;
//   - the last sync failed: Redis may be down, and the policy's
//     on_store_error must apply (refused when closed, the split limit when
//     open), not a local share that no sync corrects;
//   - t.Cost is more than this instance's whole share but not more than
//     what is left for all: fewer than N units left (every share rounds
//     down to 0), or a cost above remaining / N. Redis decides those
//     exactly, rather than no instance ever allowing them.
func (h *HotKeys) Decide(t limit.Take, interval time.Duration) (res limit.Result, ok bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entry(t, interval, now)
	if e == nil {
		return limit.Result{}, false
	}
	// Used keys stay in the table and keep being synced: while syncs fail,
	// their next sync is the probe that brings sync mode back.
	e.lastUsed = now
	h.roll(e, now)
	if h.failing || (t.Cost > e.share && t.Cost <= e.avail) {
		return limit.Result{}, false // decided exactly, as listed above
	}

	res = limit.Result{Limit: t.Limit, ResetAfter: e.resetAfter(now)}
	if e.spent+t.Cost <= e.share {
		e.spent += t.Cost
		if t.Cost > 0 {
			e.add(t.Cost, now)
		}
		res.Allowed, res.Spent = true, t.Cost > 0
	} else {
		wait := e.nextSync.Sub(now)
		if t.Algorithm == limit.FixedWindow {
			wait = min(wait, e.resetAt.Sub(now))
		}
		res.RetryAfter = max(wait, time.Millisecond)
	}
	res.Remaining = max(0, e.share-e.spent)
	return res, true
}

// entry is t's entry, new when t.Key has none; nil when the table is full.
func (h *HotKeys) entry(t limit.Take, interval time.Duration, now time.Time) *hotEntry {
	if e := h.entries[t.Key]; e != nil {
		return e
	}
	if len(h.entries) >= h.maxKeys {
		return nil
	}
	tmpl := t
	tmpl.Cost = 0
	// Nothing known yet: assume a full share, learn the truth at the
	// next sync (due at once).
	e := &hotEntry{take: tmpl, interval: interval, resetAt: now.Add(t.Window), nextSync: now}
	h.setShare(e, t.Limit)
	h.entries[t.Key] = e
	return e
}

// Refund gives back a local spend of a batch that was denied elsewhere.
func (h *HotKeys) Refund(t limit.Take) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[t.Key]
	if e == nil || t.Cost <= 0 {
		return
	}
	e.spent = max(0, e.spent-t.Cost)
	for i := len(e.pending) - 1; i >= 0 && t.Cost > 0; i-- {
		n := min(e.pending[i].n, t.Cost)
		e.pending[i].n -= n
		t.Cost -= n
	}
}

// roll starts a new local window when the current one has ended: every
// instance then assumes a full window until its next sync says otherwise.
func (h *HotKeys) roll(e *hotEntry, now time.Time) {
	if e.take.Algorithm != limit.FixedWindow || now.Before(e.resetAt) {
		return
	}
	e.spent = 0
	e.resetAt = now.Add(e.take.Window)
	h.setShare(e, e.take.Limit)
}

// setShare gives e its share, for one sync interval, of remaining, the
// global remainder: floor(avail / N). A bucket's avail is what it holds
// (negative when in debt) plus one interval's refill, so a debt is paid
// back before anything is spent again.
//
// Rounding down means the shares never add up to more than avail; rounding
// up would let N instances overshoot by up to N-1 at every sync. What the
// rounding leaves (fewer than N units) is decided exactly (Decide), else a
// limit below N would allow nothing at all.
func (h *HotKeys) setShare(e *hotEntry, remaining int64) {
	n := int64(max(1, h.instances()))
	avail := remaining
	if e.take.Algorithm == limit.TokenBucket {
		avail = min(avail, e.take.Limit) + int64(e.take.Rate*e.interval.Seconds())
	}
	e.avail = max(0, avail)
	e.share = e.avail / n
}

func (e *hotEntry) add(n int64, now time.Time) {
	if k := len(e.pending); k > 0 && e.pending[k-1].windowEnd.Equal(e.resetAt) && now.Sub(e.pending[k-1].at) < e.interval {
		e.pending[k-1].n += n
		return
	}
	e.pending = append(e.pending, delta{n: n, at: now, windowEnd: e.resetAt})
}

func (e *hotEntry) resetAfter(now time.Time) time.Duration {
	if e.take.Algorithm == limit.FixedWindow {
		return max(0, e.resetAt.Sub(now))
	}
	return 0
}

// live drops the deltas that no longer matter: spent in a window that has
// ended, or, for a bucket, longer ago than it takes to refill completely.
func (h *HotKeys) live(e *hotEntry, now time.Time) {
	keep := e.pending[:0]
	for _, d := range e.pending {
		stale := e.take.Algorithm == limit.FixedWindow && !now.Before(d.windowEnd)
		if e.take.Algorithm == limit.TokenBucket {
			stale = now.Sub(d.at) > time.Duration(float64(e.take.Limit)/e.take.Rate*float64(time.Second))
		}
		if stale {
			h.discarded.Add(d.n)
			continue
		}
		if d.n > 0 {
			keep = append(keep, d)
		}
	}
	e.pending = keep
}

// Lost is the total of deltas a failed last sync at shutdown left unsent:
// spent, and never counted in Redis.
func (h *HotKeys) Lost() int64 { return h.lost.Load() }

// Discarded is the total of deltas dropped because their window had ended
// before a sync could send them.
func (h *HotKeys) Discarded() int64 { return h.discarded.Load() }

// Pending is the total of deltas not yet in Redis.
func (h *HotKeys) Pending() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, e := range h.entries {
		for _, d := range e.pending {
			n += d.n
		}
	}
	return n
}

// Len is the number of keys in the local table.
func (h *HotKeys) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries)
}
