package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// SyncDue syncs every key whose interval has passed, Batch keys per round
// trip. After a batch fails, the rest wait for the next interval: a Redis
// that failed one batch would most likely fail them all, each after a
// timeout.
func (h *HotKeys) SyncDue(ctx context.Context) error {
	due := h.due(h.now())
	if len(due) == 0 {
		return nil // nothing sent: says nothing of Redis, failing stays as it is
	}
	for len(due) > 0 {
		n := min(len(due), h.batch)
		if err := h.syncBatch(ctx, due[:n]); err != nil {
			h.fail(ctx, due, err)
			return err
		}
		due = due[n:]
	}
	h.recover(ctx)
	return nil
}

// dueKey is one key of a sync: what was sent, and the entry it came from.
type dueKey struct {
	e    *hotEntry
	item limit.SyncItem
}

// due collects the keys whose sync is due, with their unsent deltas, and
// drops the idle ones.
func (h *HotKeys) due(now time.Time) []dueKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	var due []dueKey
	for k, e := range h.entries {
		h.live(e, now)
		if len(e.pending) == 0 && now.Sub(e.lastUsed) > 3*e.interval+e.take.Window {
			delete(h.entries, k) // idle: the table stays bounded
			continue
		}
		if now.Before(e.nextSync) {
			continue
		}
		// A zero delta is sent too: the store only reads that key (it never
		// writes, so no window starts without a hit), for a fresh share.
		due = append(due, dueKey{e: e, item: limit.SyncItem{Take: e.take, Delta: e.unsent()}})
	}
	return due
}

// syncBatch sends one batch and, when it succeeded, gives each of its keys
// its new share.
func (h *HotKeys) syncBatch(ctx context.Context, batch []dueKey) error {
	items := make([]limit.SyncItem, len(batch))
	for i, d := range batch {
		items[i] = d.item
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	states, err := h.store.Sync(ctx, items)
	cancel()
	if err == nil && len(states) != len(items) {
		err = fmt.Errorf("hot keys: store answered %d states for %d keys", len(states), len(items))
	}
	if err != nil {
		return err
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for i, d := range batch {
		e := d.e
		e.drop(d.item.Delta)
		if e.take.Algorithm == limit.FixedWindow {
			e.resetAt = now.Add(states[i].ResetAfter)
		}
		h.setShare(e, states[i].Remaining)
		// What was spent here while the sync was in flight is not in the
		// global figure yet: it comes out of the new share.
		e.spent = e.unsent()
		e.nextSync = now.Add(e.interval)
	}
	return nil
}

// fail keeps the deltas of the keys not synced (due: the failed batch and
// those after it) for the next interval, and sends sync-mode checks to the
// Limiter's counter until a sync succeeds.
func (h *HotKeys) fail(ctx context.Context, due []dueKey, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, d := range due {
		d.e.nextSync = now.Add(d.e.interval) // deltas stay pending: sent with the next sync
	}
	if !h.failing {
		h.failing = true
		h.log.ErrorContext(ctx, "hot key sync failed; deltas kept, sync-mode checks decided by each policy's on_store_error until a sync succeeds",
			"keys", len(due), "err", err)
	}
}

// recover decides sync-mode checks locally again: every batch went through.
func (h *HotKeys) recover(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing {
		h.failing = false
		h.log.InfoContext(ctx, "hot key sync recovered: sync-mode checks decided locally again")
	}
}

// unsent is what was spent here and is not yet in Redis.
func (e *hotEntry) unsent() int64 {
	var n int64
	for _, d := range e.pending {
		n += d.n
	}
	return n
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

// Flush sends every pending count now, for at most 5 seconds, and counts
// what it could not send as lost (Lost). Call it once, at shutdown, after
// the last request that spends hot-key counts has been answered.
func (h *HotKeys) Flush(ctx context.Context) {
	h.mu.Lock()
	for _, e := range h.entries {
		if len(e.pending) > 0 {
			e.nextSync = time.Time{}
		}
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := h.SyncDue(ctx)
	if lost := h.Pending(); lost > 0 {
		h.lost.Add(lost)
		h.log.ErrorContext(ctx, "hot key counts lost at shutdown: the last sync failed", "units", lost, "err", err)
	}
}
