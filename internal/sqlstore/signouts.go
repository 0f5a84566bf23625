package sqlstore

import (
	"context"
	"fmt"
	"time"
)

// Ops sessions signed out before they expire (see the ops_signouts
// migration). Expired rows are never returned, and are deleted by the
// next sign-out.

// RevokeSession keeps the session id signed out until until (its expiry).
// Signing out twice is not an error.
func (s *SQL) RevokeSession(ctx context.Context, id string, until time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, s.rebind(
		`INSERT INTO ops_signouts (id, expires_at) VALUES (?, ?)
		 ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at`),
		id, until.UnixMilli()); err != nil {
		return fmt.Errorf("store: revoke session: %w", err)
	}
	// Keep the table to the sessions that could still be used: a few per
	// sign-in in the last session lifetime.
	if _, err := s.db.ExecContext(ctx, s.rebind(`DELETE FROM ops_signouts WHERE expires_at <= ?`), s.now().UnixMilli()); err != nil {
		return fmt.Errorf("store: revoke session: prune: %w", err)
	}
	return nil
}

// ListRevokedSessions returns the ids of the sessions signed out that have
// not expired yet.
func (s *SQL) ListRevokedSessions(ctx context.Context) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.rebind(`SELECT id FROM ops_signouts WHERE expires_at > ?`), s.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: list revoked sessions: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: list revoked sessions: %w", err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list revoked sessions: %w", err)
	}
	return out, nil
}
