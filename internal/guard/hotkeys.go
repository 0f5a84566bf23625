package guard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// SyncItem is what one instance counted on its own for one hot key since
// its last sync.
type SyncItem struct {
	Take        // the key and its policy; Cost is unused
	Delta int64 // spent locally, not yet in Redis
}

// SyncState is a hot key's global state after a sync.
type SyncState struct {
	Remaining  int64         // may be negative when the instances overshot
	ResetAfter time.Duration // fixed window: until the window ends
}

// SyncStore adds deltas to hot keys and reads back their global state, in
// one round trip for all keys.
type SyncStore interface {
	Sync(ctx context.Context, items []SyncItem) ([]SyncState, error)
}

// HotKeysOptions configure the local counters of sync-mode policies.
type HotKeysOptions struct {
	Store SyncStore
	// Instances returns the number of live instances sharing the limits
	// (N); 1 when nil.
	Instances func() int
	Now       func() time.Time // time.Now when nil
	Logger    *slog.Logger
	// MaxKeys bounds the local table; keys beyond it are decided exactly
	// (in Redis) instead. Default 100,000.
	MaxKeys int
}

// HotKeys decides sync-mode checks locally and syncs them with Redis every
// sync_interval: "local counters with periodic sync".
//
// Between syncs an instance spends at most its share of what was left
// globally at its last sync: ceil(remaining / N), plus, for a token bucket,
// its share of what refills during one interval. At each sync it sends its
// unsent deltas (INCRBY for a window, the sync script for a bucket) and
// reads back the global remainder, for all its keys in one round trip.
//
// Overshoot: instances read the global total at slightly different times,
// so each may count on what others spent but have not yet sent. Per window
// (or per bucket refill), what all instances allow is at most
//
//	limit + (N - 1) + A,  A = min(limit, what they allowed together in one sync interval)
//
// and it corrects itself: a window's overshoot ends with the window, a
// bucket's is a debt that its refill pays back first.
//
// A sync that fails keeps its deltas and sends them with the next one; a
// delta whose window has ended no longer matters and is discarded (counted
// in Discarded). A sync that timed out may still have counted: its delta is
// sent again, so Redis may count it twice; errors are on the side of
// refusing.
type HotKeys struct {
	store     SyncStore
	instances func() int
	now       func() time.Time
	log       *slog.Logger
	maxKeys   int

	mu      sync.Mutex
	entries map[Key]*hotEntry
	failing bool

	discarded atomic.Int64
}

type hotEntry struct {
	take      Take // the template: key and policy, Cost 0
	interval  time.Duration
	remaining int64     // global remainder at the last sync (or assumed)
	resetAt   time.Time // fixed window: when the current window ends
	budget    int64     // what this instance may spend until the next sync
	spent     int64     // of budget, since the last sync
	pending   []delta   // spent here, not yet in Redis; oldest first
	nextSync  time.Time
	lastUsed  time.Time
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
		entries: map[Key]*hotEntry{}}
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
	return h
}

// Decide spends t.Cost locally. ok is false when the table is full and
// the caller must decide in Redis instead.
func (h *HotKeys) Decide(t Take, interval time.Duration) (res Result, ok bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entries[t.Key]
	if e == nil {
		if len(h.entries) >= h.maxKeys {
			return Result{}, false
		}
		tmpl := t
		tmpl.Cost = 0
		// Nothing known yet: assume a full budget, learn the truth at the
		// next sync (due at once).
		e = &hotEntry{take: tmpl, interval: interval, remaining: t.Limit, resetAt: now.Add(t.Window), nextSync: now}
		e.budget = h.share(e, e.remaining)
		h.entries[t.Key] = e
	}
	e.lastUsed = now
	h.roll(e, now)

	res = Result{Limit: t.Limit, ResetAfter: e.resetAfter(now)}
	if e.spent+t.Cost <= e.budget {
		e.spent += t.Cost
		if t.Cost > 0 {
			e.add(t.Cost, now)
		}
		res.Allowed, res.Spent = true, t.Cost > 0
	} else {
		wait := e.nextSync.Sub(now)
		if t.Algorithm == FixedWindow {
			wait = min(wait, e.resetAt.Sub(now))
		}
		res.RetryAfter = max(wait, time.Millisecond)
	}
	res.Remaining = max(0, e.budget-e.spent)
	return res, true
}

// Refund gives back a local spend of a batch that was denied elsewhere.
func (h *HotKeys) Refund(t Take) {
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
	if e.take.Algorithm != FixedWindow || now.Before(e.resetAt) {
		return
	}
	e.remaining, e.spent = e.take.Limit, 0
	e.resetAt = now.Add(e.take.Window)
	e.budget = h.share(e, e.remaining)
}

// share is this instance's part of remaining for one sync interval.
func (h *HotKeys) share(e *hotEntry, remaining int64) int64 {
	n := int64(max(1, h.instances()))
	avail := max(0, remaining)
	if e.take.Algorithm == TokenBucket {
		avail = min(avail, e.take.Limit) + int64(e.take.Rate*e.interval.Seconds())
	}
	return (avail + n - 1) / n
}

func (e *hotEntry) add(n int64, now time.Time) {
	if k := len(e.pending); k > 0 && e.pending[k-1].windowEnd.Equal(e.resetAt) && now.Sub(e.pending[k-1].at) < e.interval {
		e.pending[k-1].n += n
		return
	}
	e.pending = append(e.pending, delta{n: n, at: now, windowEnd: e.resetAt})
}

func (e *hotEntry) resetAfter(now time.Time) time.Duration {
	if e.take.Algorithm == FixedWindow {
		return max(0, e.resetAt.Sub(now))
	}
	return 0
}

// live drops the deltas that no longer matter: spent in a window that has
// ended, or, for a bucket, longer ago than it takes to refill completely.
func (h *HotKeys) live(e *hotEntry, now time.Time) {
	keep := e.pending[:0]
	for _, d := range e.pending {
		stale := e.take.Algorithm == FixedWindow && !now.Before(d.windowEnd)
		if e.take.Algorithm == TokenBucket {
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

// SyncDue syncs every key whose interval has passed, in one round trip.
func (h *HotKeys) SyncDue(ctx context.Context) error {
	now := h.now()
	h.mu.Lock()
	var items []SyncItem
	var due []*hotEntry
	var sent []int64
	for k, e := range h.entries {
		h.live(e, now)
		if len(e.pending) == 0 && now.Sub(e.lastUsed) > 3*e.interval+e.take.Window {
			delete(h.entries, k) // idle: the table stays bounded
			continue
		}
		if now.Before(e.nextSync) {
			continue
		}
		var n int64
		for _, d := range e.pending {
			n += d.n
		}
		items = append(items, SyncItem{Take: e.take, Delta: n})
		due = append(due, e)
		sent = append(sent, n)
	}
	h.mu.Unlock()
	if len(items) == 0 {
		return nil
	}

	states, err := h.store.Sync(ctx, items)
	if err == nil && len(states) != len(items) {
		err = fmt.Errorf("hot keys: store answered %d states for %d keys", len(states), len(items))
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	now = h.now()
	if err != nil {
		for _, e := range due {
			e.nextSync = now.Add(e.interval) // deltas stay pending: sent with the next sync
		}
		if !h.failing {
			h.failing = true
			h.log.ErrorContext(ctx, "hot key sync failed; counting locally, deltas kept", "keys", len(items), "err", err)
		}
		return err
	}
	if h.failing {
		h.failing = false
		h.log.InfoContext(ctx, "hot key sync recovered", "keys", len(items))
	}
	for i, e := range due {
		e.drop(sent[i])
		var unsent int64
		for _, d := range e.pending {
			unsent += d.n
		}
		e.remaining = states[i].Remaining
		if e.take.Algorithm == FixedWindow {
			e.resetAt = now.Add(states[i].ResetAfter)
		}
		// What was spent here while the sync was in flight is not in the
		// global figure yet: it comes out of the new budget.
		e.budget, e.spent = h.share(e, e.remaining), unsent
		e.nextSync = now.Add(e.interval)
	}
	return nil
}

// drop removes n from the oldest pending deltas: they reached Redis.
func (e *hotEntry) drop(n int64) {
	for len(e.pending) > 0 && n > 0 {
		d := min(e.pending[0].n, n)
		e.pending[0].n -= d
		n -= d
		if e.pending[0].n == 0 {
			e.pending = e.pending[1:]
		}
	}
}

// Run syncs due keys every tick until ctx ends, then makes a last attempt
// to send what is pending.
func (h *HotKeys) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			sctx, cancel := context.WithTimeout(ctx, max(tick, time.Second))
			_ = h.SyncDue(sctx)
			cancel()
		}
	}
}

func (h *HotKeys) flush(ctx context.Context) {
	h.mu.Lock()
	for _, e := range h.entries {
		e.nextSync = time.Time{}
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := h.SyncDue(ctx); err != nil {
		h.log.Warn("hot key deltas lost at shutdown", "err", err)
	}
}

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
