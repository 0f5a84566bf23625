package guard

import (
	"context"
	"strings"
	"time"
)

// Ops decisions (deny-list entries, the audit trail) live in SQL rather than
// Redis: they must survive a Redis flush or failover, and nobody may lose the
// record of who unblocked whom because a cache was emptied.

// maxDenyDigits is the longest E.164 number; a longer pattern can match nothing.
const maxDenyDigits = 15

// DenyEntry is a deny-listed number or number prefix. Pattern is "+" and
// digits: a whole E.164 number ("+919800000000") blocks that number, a
// shorter one ("+88213") blocks every number it begins.
type DenyEntry struct {
	ID        int64
	Pattern   string
	Reason    string
	Author    string
	CreatedAt time.Time
	// ExpiresAt is nil for an entry that stays until removed. Temporary
	// entries exist so that an emergency block cannot be forgotten forever.
	ExpiresAt *time.Time
}

// Expired reports whether the entry has stopped applying at now. An entry
// is already expired at the instant ExpiresAt, so that "expires at 12:00"
// never blocks a send at 12:00.
func (d DenyEntry) Expired(now time.Time) bool {
	return d.ExpiresAt != nil && !now.Before(*d.ExpiresAt)
}

// Matches reports whether the entry blocks the E.164 number e164 at now.
// The time is passed in, not read, so that one decision uses one clock.
// An entry with a malformed pattern matches nothing: an empty or "+"
// pattern would otherwise block every number.
func (d DenyEntry) Matches(e164 string, now time.Time) bool {
	if !validDenyPattern(d.Pattern) || d.Expired(now) {
		return false
	}
	return strings.HasPrefix(e164, d.Pattern)
}

// ValidateDenyPattern returns an *Error with CodeInvalidRequest unless p is
// "+" followed by 1 to 15 ASCII digits.
func ValidateDenyPattern(p string) error {
	if !validDenyPattern(p) {
		return Errorf(CodeInvalidRequest,
			"pattern must be '+' followed by 1 to %d digits, like +919800000000 or +88213", maxDenyDigits)
	}
	return nil
}

func validDenyPattern(p string) bool {
	if len(p) < 2 || len(p) > 1+maxDenyDigits || p[0] != '+' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// DenyList stores the numbers and prefixes that may not receive an OTP.
type DenyList interface {
	// AddDeny stores e and returns it with ID set and times as stored
	// (a zero CreatedAt becomes now).
	AddDeny(ctx context.Context, e DenyEntry) (DenyEntry, error)
	// RemoveDeny returns ErrNotFound when no entry has that id.
	RemoveDeny(ctx context.Context, id int64) error
	// ListDeny returns the entries that have not expired, oldest first.
	ListDeny(ctx context.Context) ([]DenyEntry, error)
}

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
	Since  time.Time // inclusive
	Until  time.Time // exclusive
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
	// becomes now.
	WriteEvents(ctx context.Context, events []Event) error
	// ListEvents returns matching events, newest (highest ID) first.
	ListEvents(ctx context.Context, f EventFilter) ([]Event, error)
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
