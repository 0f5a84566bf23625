package sqlstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// ErrNotConnected is what the ops side gets from a Lazy store while this
// instance has not connected to the database yet (it started while the
// database was unreachable, and keeps trying).
var ErrNotConnected = errors.New("ops database: not connected yet")

// Lazy is the ops database as the ops side sees it: the SQL store once
// connected (Connect), ErrNotConnected before. OTP sends and limit checks
// never wait for it; the ops routes that need it answer 503
// database_unavailable until it is there.
type Lazy struct {
	sql atomic.Pointer[SQL]
	// lastErr is the outcome of the latest deny-list reload (nil: it
	// succeeded): whether a connected database still answers.
	lastErr atomic.Pointer[error]
	// denyLoaded is set by the first successful deny-list load.
	denyLoaded atomic.Bool
	since      atomic.Pointer[time.Time] // of the current state
}

var (
	_ ops.DenyList        = (*Lazy)(nil)
	_ ops.AuditLog        = (*Lazy)(nil)
	_ ops.Activity        = (*Lazy)(nil)
	_ ops.ServiceActivity = (*Lazy)(nil)
	_ ops.Retention       = (*Lazy)(nil)
)

// Connect puts db in service: every call from now on goes to it.
func (d *Lazy) Connect(db *SQL) { d.sql.Store(db) }

// SQL is the SQL store; nil until Connect.
func (d *Lazy) SQL() *SQL { return d.sql.Load() }

func (d *Lazy) get() (*SQL, error) {
	if s := d.sql.Load(); s != nil {
		return s, nil
	}
	return nil, ErrNotConnected
}

// AddDeny implements ops.DenyList.
func (d *Lazy) AddDeny(ctx context.Context, e guard.DenyEntry) (guard.DenyEntry, error) {
	s, err := d.get()
	if err != nil {
		return guard.DenyEntry{}, err
	}
	return s.AddDeny(ctx, e)
}

// RemoveDeny implements ops.DenyList.
func (d *Lazy) RemoveDeny(ctx context.Context, id int64) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.RemoveDeny(ctx, id)
}

// ListDeny implements ops.DenyList.
func (d *Lazy) ListDeny(ctx context.Context) ([]guard.DenyEntry, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListDeny(ctx)
}

// PruneExpiredDeny implements ops.Retention.
func (d *Lazy) PruneExpiredDeny(ctx context.Context, before time.Time) (int64, error) {
	s, err := d.get()
	if err != nil {
		return 0, err
	}
	return s.PruneExpiredDeny(ctx, before)
}

// WriteEvents implements ops.AuditLog.
func (d *Lazy) WriteEvents(ctx context.Context, events []guard.Event) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.WriteEvents(ctx, events)
}

// ListEvents implements ops.AuditLog.
func (d *Lazy) ListEvents(ctx context.Context, f ops.EventFilter) ([]guard.Event, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListEvents(ctx, f)
}

// PruneEvents implements ops.AuditLog.
func (d *Lazy) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	s, err := d.get()
	if err != nil {
		return 0, err
	}
	return s.PruneEvents(ctx, before)
}

// CountActivity implements ops.Activity.
func (d *Lazy) CountActivity(ctx context.Context, since, until time.Time) ([]ops.ActivityCount, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.CountActivity(ctx, since, until)
}

// CountByService implements ops.ServiceActivity.
func (d *Lazy) CountByService(ctx context.Context, since, until time.Time) ([]ops.ServiceCount, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.CountByService(ctx, since, until)
}

// RevokeSession keeps the ops session id signed out until until
// (ops.SignOutLog).
func (d *Lazy) RevokeSession(ctx context.Context, id string, until time.Time) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.RevokeSession(ctx, id, until)
}

// ListRevokedSessions returns the sessions signed out and not yet expired
// (ops.SignOutLog).
func (d *Lazy) ListRevokedSessions(ctx context.Context) ([]string, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListRevokedSessions(ctx)
}

// DenyReloaded records the outcome of a deny-list reload: the best sign
// of whether the database answers.
func (d *Lazy) DenyReloaded(err error) {
	was := d.lastErr.Load()
	d.lastErr.Store(&err)
	if err == nil {
		d.denyLoaded.Store(true)
	}
	if was == nil || (*was == nil) != (err == nil) {
		now := time.Now()
		d.since.Store(&now)
	}
}

// State is the ops database as /ops/status reports it: connecting, up or
// down (the last deny-list reload failed), since when, and whether the
// deny-list has loaded once.
func (d *Lazy) State() (state string, since time.Time, denyLoaded bool) {
	if t := d.since.Load(); t != nil {
		since = *t
	}
	switch e := d.lastErr.Load(); {
	case d.sql.Load() == nil:
		state = "connecting"
	case e != nil && *e != nil:
		state = "down"
	default:
		state = "up"
	}
	return state, since, d.denyLoaded.Load()
}

// The emergency overrides live in the ops database (overrides.go); these
// reach it through the connection that may not be up yet, as the deny-list
// does.

// AddOverride implements ops.OverrideList.
func (d *Lazy) AddOverride(ctx context.Context, o guard.Override) (guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return guard.Override{}, err
	}
	return s.AddOverride(ctx, o)
}

// RemoveOverride implements ops.OverrideList.
func (d *Lazy) RemoveOverride(ctx context.Context, id int64) (guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return guard.Override{}, err
	}
	return s.RemoveOverride(ctx, id)
}

// ListOverrides implements ops.OverrideList.
func (d *Lazy) ListOverrides(ctx context.Context, now time.Time) ([]guard.Override, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListOverrides(ctx, now)
}
