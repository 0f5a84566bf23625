package ops

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// SignOutLog keeps the ops sessions signed out before they expire, durably
// (the SQL store): a sign-out must outlive Redis, which may restart empty.
type SignOutLog interface {
	// RevokeSession keeps id signed out until until.
	RevokeSession(ctx context.Context, id string, until time.Time) error
	// ListRevokedSessions returns the ids signed out and not yet expired.
	ListRevokedSessions(ctx context.Context) ([]string, error)
}

// SharedSignOuts is the shared store (Redis) the sign-outs are also written
// to, so that every instance sees one at once rather than at its next
// refresh.
type SharedSignOuts interface {
	RevokeSession(ctx context.Context, id string, until time.Time) error
	SessionRevoked(ctx context.Context, id string) (bool, error)
}

// SignOutsOptions tune SignOuts.
type SignOutsOptions struct {
	// Shared, when set, also holds every sign-out, for an immediate effect
	// on every instance; SignOuts works without it.
	Shared  SharedSignOuts
	Refresh time.Duration // DefaultDenyRefresh when 0
	Logger  *slog.Logger
}

// SignOuts is the ops sessions signed out: kept in the SignOutLog, cached
// in each instance and reloaded every Refresh like the deny-list, so that a
// signed-out session stays refused whatever happens to Redis (restarted
// empty, down). Its RevokeSession and SessionRevoked are what the HTTP
// layer's session store needs.
type SignOuts struct {
	log     SignOutLog
	o       SignOutsOptions
	mu      sync.Mutex // serialises reloads and local additions
	ids     atomic.Pointer[map[string]struct{}]
	loaded  atomic.Pointer[time.Time]
	failing bool
}

// NewSignOuts returns the sign-outs kept in log. The cache is empty until
// the first Reload: call Reload at start-up, then Run.
func NewSignOuts(log SignOutLog, o SignOutsOptions) *SignOuts {
	if o.Refresh <= 0 {
		o.Refresh = DefaultDenyRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &SignOuts{log: log, o: o}
	s.ids.Store(&map[string]struct{}{})
	return s
}

// RevokeSession signs the session id out until until. It fails when the
// SignOutLog does: a sign-out only Redis knew would come back to life with
// an empty Redis. The shared store is written too, best effort.
func (s *SignOuts) RevokeSession(ctx context.Context, id string, until time.Time) error {
	s.mu.Lock()
	err := s.log.RevokeSession(ctx, id, until)
	if err == nil {
		s.add(id)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if s.o.Shared != nil {
		if err := s.o.Shared.RevokeSession(ctx, id, until); err != nil {
			s.o.Logger.WarnContext(ctx, "sign-out kept in the database but not in Redis; other instances refuse the session from their next refresh", "err", err)
		}
	}
	return nil
}

// SessionRevoked reports whether id was signed out: from this instance's
// cache, else from the shared store (which may know a sign-out made on
// another instance since the last refresh).
func (s *SignOuts) SessionRevoked(ctx context.Context, id string) (bool, error) {
	if _, ok := (*s.ids.Load())[id]; ok {
		return true, nil
	}
	if s.o.Shared == nil {
		return false, nil
	}
	return s.o.Shared.SessionRevoked(ctx, id)
}

// add puts id in the cache; s.mu is held.
func (s *SignOuts) add(id string) {
	old := *s.ids.Load()
	ids := make(map[string]struct{}, len(old)+1)
	for k := range old {
		ids[k] = struct{}{}
	}
	ids[id] = struct{}{}
	s.ids.Store(&ids)
}

// LoadedAt is when the cache was last loaded; zero before the first load.
func (s *SignOuts) LoadedAt() time.Time {
	if t := s.loaded.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Reload reads the sign-outs from the log. On failure the cache in force
// stays (it only ever loses sign-outs that have expired).
func (s *SignOuts) Reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	list, err := s.log.ListRevokedSessions(ctx)
	if err != nil {
		if !s.failing {
			s.failing = true
			s.o.Logger.WarnContext(ctx, "reloading the ops sign-outs failed; enforcing the ones last loaded", "err", err)
		}
		return err
	}
	s.failing = false
	ids := make(map[string]struct{}, len(list))
	for _, id := range list {
		ids[id] = struct{}{}
	}
	s.ids.Store(&ids)
	now := time.Now()
	s.loaded.Store(&now)
	return nil
}

// Run reloads every Refresh until ctx is cancelled.
func (s *SignOuts) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Reload(ctx) // logged inside; the cache in force stays
		}
	}
}
