package app

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// errDatabaseNotConnected is what the ops side gets from the database while
// this instance has not connected to it yet (it started while the database
// was unreachable, and keeps trying: opsStack.connect).
var errDatabaseNotConnected = errors.New("ops database: not connected yet")

// database is the ops database as the ops side sees it: the SQL store once
// connected, errDatabaseNotConnected before. OTP sends and limit checks
// never wait for it; the ops routes that need it answer 503
// database_unavailable until it is there.
type database struct {
	sql atomic.Pointer[sqlstore.SQL]
	// lastErr is the outcome of the latest deny-list reload (nil: it
	// succeeded): whether a connected database still answers.
	lastErr atomic.Pointer[error]
	// denyLoaded is set by the first successful deny-list load.
	denyLoaded atomic.Bool
	since      atomic.Pointer[time.Time] // of the current state
}

var (
	_ ops.DenyList  = (*database)(nil)
	_ ops.AuditLog  = (*database)(nil)
	_ ops.Activity  = (*database)(nil)
	_ ops.Retention = (*database)(nil)
)

func (d *database) get() (*sqlstore.SQL, error) {
	if s := d.sql.Load(); s != nil {
		return s, nil
	}
	return nil, errDatabaseNotConnected
}

// AddDeny implements ops.DenyList.
func (d *database) AddDeny(ctx context.Context, e guard.DenyEntry) (guard.DenyEntry, error) {
	s, err := d.get()
	if err != nil {
		return guard.DenyEntry{}, err
	}
	return s.AddDeny(ctx, e)
}

// RemoveDeny implements ops.DenyList.
func (d *database) RemoveDeny(ctx context.Context, id int64) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.RemoveDeny(ctx, id)
}

// ListDeny implements ops.DenyList.
func (d *database) ListDeny(ctx context.Context) ([]guard.DenyEntry, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListDeny(ctx)
}

// PruneExpiredDeny implements ops.Retention.
func (d *database) PruneExpiredDeny(ctx context.Context, before time.Time) (int64, error) {
	s, err := d.get()
	if err != nil {
		return 0, err
	}
	return s.PruneExpiredDeny(ctx, before)
}

// WriteEvents implements ops.AuditLog.
func (d *database) WriteEvents(ctx context.Context, events []guard.Event) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.WriteEvents(ctx, events)
}

// ListEvents implements ops.AuditLog.
func (d *database) ListEvents(ctx context.Context, f ops.EventFilter) ([]guard.Event, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListEvents(ctx, f)
}

// PruneEvents implements ops.AuditLog.
func (d *database) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	s, err := d.get()
	if err != nil {
		return 0, err
	}
	return s.PruneEvents(ctx, before)
}

// CountActivity implements ops.Activity.
func (d *database) CountActivity(ctx context.Context, since, until time.Time) ([]ops.ActivityCount, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.CountActivity(ctx, since, until)
}

// RevokeSession keeps the ops session id signed out until until
// (ops.SignOutLog).
func (d *database) RevokeSession(ctx context.Context, id string, until time.Time) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.RevokeSession(ctx, id, until)
}

// ListRevokedSessions returns the sessions signed out and not yet expired
// (ops.SignOutLog).
func (d *database) ListRevokedSessions(ctx context.Context) ([]string, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListRevokedSessions(ctx)
}

// denyReloaded records the outcome of a deny-list reload: the best sign
// of whether the database answers.
func (d *database) denyReloaded(err error) {
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

// DatabaseState is the ops database as /ops/status reports it.
func (d *database) state() (state string, since time.Time, denyLoaded bool) {
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
