package ops

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// DenyList stores the numbers and prefixes that may not receive an OTP.
type DenyList interface {
	// AddDeny stores e and returns it with ID set and times as stored
	// (a zero CreatedAt becomes now).
	AddDeny(ctx context.Context, e guard.DenyEntry) (guard.DenyEntry, error)
	// RemoveDeny returns guard.ErrNotFound when no entry has that id.
	RemoveDeny(ctx context.Context, id int64) error
	// ListDeny returns the entries that have not expired, oldest first.
	ListDeny(ctx context.Context) ([]guard.DenyEntry, error)
}

// DefaultDenyRefresh is how often a DenyCache reloads the deny-list: the
// longest an ops change made on another instance goes unenforced here.
const DefaultDenyRefresh = 2 * time.Second

// maxPatternLen is the longest deny pattern there is: "+" and the 15 digits
// of the longest E.164 number (guard.ValidateDenyPattern refuses longer).
const maxPatternLen = 1 + 15

// denyLoadTimeout bounds one reload, so that a hung database delays the
// next attempt instead of stopping refreshes for good.
const denyLoadTimeout = 5 * time.Second

// DenyCacheOptions tune a DenyCache.
type DenyCacheOptions struct {
	Refresh time.Duration // DefaultDenyRefresh when 0
	Logger  *slog.Logger
	// OnRefresh, when set, is told the outcome of every reload (for metrics).
	OnRefresh func(entries int, err error)
	// Also, when set, is reloaded by every reload, after the deny-list:
	// what else every instance must pick up within the refresh interval
	// (the emergency overrides, OverrideCache.Reload).
	Also func(ctx context.Context) error
}

// DenyCache answers Denied from memory and reloads the deny-list from the
// store every Refresh. Sends never wait on the database: when a reload
// fails, the last good list stays in force until one succeeds. It
// implements guard.DenyChecker.
type DenyCache struct {
	list      DenyList
	refresh   time.Duration
	log       *slog.Logger
	onRefresh func(int, error)
	also      func(context.Context) error

	snap atomic.Pointer[denySnapshot]
	// mu serialises reloads, so a slow reload cannot overwrite the result
	// of a newer one (an ops change reloads at once, beside the ticker).
	mu      sync.Mutex
	failing bool
}

// denySnapshot is one loaded list, never changed after it is published.
type denySnapshot struct {
	entries   []guard.DenyEntry
	byPattern map[string][]guard.DenyEntry
	loadedAt  time.Time
}

var _ guard.DenyChecker = (*DenyCache)(nil)

// NewDenyCache returns a cache over list. It is empty until the first
// Reload: call Reload at start-up, then Run.
func NewDenyCache(list DenyList, o DenyCacheOptions) *DenyCache {
	if o.Refresh <= 0 {
		o.Refresh = DefaultDenyRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnRefresh == nil {
		o.OnRefresh = func(int, error) {}
	}
	c := &DenyCache{list: list, refresh: o.Refresh, log: o.Logger, onRefresh: o.OnRefresh, also: o.Also}
	c.snap.Store(&denySnapshot{})
	return c
}

// Denied reports the entry that blocks e164 at now, if any. It looks up
// each prefix of the number in a map, so its cost does not grow with the
// size of the list.
func (c *DenyCache) Denied(e164 string, now time.Time) (guard.DenyEntry, bool) {
	s := c.snap.Load()
	if len(s.byPattern) == 0 {
		return guard.DenyEntry{}, false
	}
	for n := 2; n <= len(e164) && n <= maxPatternLen; n++ {
		for _, e := range s.byPattern[e164[:n]] {
			if e.Matches(e164, now) {
				return e, true
			}
		}
	}
	return guard.DenyEntry{}, false
}

// Entries returns the list as last loaded, oldest first (expired entries
// may remain until the next reload; Matches ignores them).
func (c *DenyCache) Entries() []guard.DenyEntry {
	return c.snap.Load().entries
}

// LoadedAt is when the list in force was loaded; zero before the first
// successful load.
func (c *DenyCache) LoadedAt() time.Time { return c.snap.Load().loadedAt }

// Reload reads the list from the store now. On failure the previous list
// stays in force and the error is returned.
func (c *DenyCache) Reload(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.also != nil { // logged by its owner; the deny-list's outcome is what is returned
		parent := ctx
		defer func() { _ = c.also(parent) }()
	}
	ctx, cancel := context.WithTimeout(ctx, denyLoadTimeout)
	defer cancel()
	entries, err := c.list.ListDeny(ctx)
	c.onRefresh(len(entries), err)
	if err != nil {
		if !c.failing { // once per outage, not every tick
			c.failing = true
			c.log.WarnContext(ctx, "deny-list reload failed; enforcing the last list loaded",
				"entries", len(c.Entries()), "loaded_at", c.LoadedAt(), "err", err)
		}
		return err
	}
	if c.failing {
		c.failing = false
		c.log.InfoContext(ctx, "deny-list reloads again", "entries", len(entries))
	}
	s := &denySnapshot{entries: entries, byPattern: make(map[string][]guard.DenyEntry, len(entries)), loadedAt: time.Now()}
	for _, e := range entries {
		if guard.ValidateDenyPattern(e.Pattern) == nil {
			s.byPattern[e.Pattern] = append(s.byPattern[e.Pattern], e)
		}
	}
	c.snap.Store(s)
	return nil
}

// Run reloads the list every Refresh until ctx is cancelled.
func (c *DenyCache) Run(ctx context.Context) {
	t := time.NewTicker(c.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.Reload(ctx) // logged and counted inside; the old list stays
		}
	}
}

// MaxDenyReason is the longest reason a deny-list entry takes, in characters.
const MaxDenyReason = maxDenyReason
