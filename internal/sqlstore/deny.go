package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// AddDeny stores e (see ops.DenyList). The pattern is validated here too,
// because the ops API is not the only way entries arrive.
func (s *SQL) AddDeny(ctx context.Context, e guard.DenyEntry) (guard.DenyEntry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := guard.ValidateDenyPattern(e.Pattern); err != nil {
		return guard.DenyEntry{}, err
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.now()
	}
	e.CreatedAt = truncMillis(e.CreatedAt)
	var expires sql.NullInt64
	if e.ExpiresAt != nil {
		// A copy: the caller's pointer must not alias what we return.
		t := truncMillis(*e.ExpiresAt)
		if !t.After(e.CreatedAt) {
			return guard.DenyEntry{}, problem.Errorf(problem.CodeInvalidRequest, "expires_at must be after created_at")
		}
		e.ExpiresAt = &t
		expires = sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
	}
	err := s.db.QueryRowContext(ctx, s.rebind(
		`INSERT INTO deny_list (pattern, reason, author, created_at, expires_at)
		 VALUES (?, ?, ?, ?, ?) RETURNING id`),
		e.Pattern, e.Reason, e.Author, e.CreatedAt.UnixMilli(), expires,
	).Scan(&e.ID)
	if err != nil {
		// A pattern is often a whole number, and this error reaches a log.
		return guard.DenyEntry{}, fmt.Errorf("store: add deny %s: %w", guard.MaskPhone(e.Pattern), err)
	}
	return e, nil
}

// RemoveDeny deletes the entry with id, expired or not; guard.ErrNotFound
// when there is none.
func (s *SQL) RemoveDeny(ctx context.Context, id int64) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := s.db.ExecContext(ctx, s.rebind(`DELETE FROM deny_list WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("store: remove deny %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: remove deny %d: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: remove deny %d: %w", id, guard.ErrNotFound)
	}
	return nil
}

// ListDeny returns the entries live now, oldest first. Expired rows stay in
// the table (they say who blocked what, and when) but are never returned.
func (s *SQL) ListDeny(ctx context.Context) ([]guard.DenyEntry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.rebind(
		`SELECT id, pattern, reason, author, created_at, expires_at
		 FROM deny_list
		 WHERE expires_at IS NULL OR expires_at > ?
		 ORDER BY id`),
		s.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: list deny: %w", err)
	}
	defer rows.Close()
	out := []guard.DenyEntry{}
	for rows.Next() {
		var (
			e       guard.DenyEntry
			created int64
			expires sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &e.Pattern, &e.Reason, &e.Author, &created, &expires); err != nil {
			return nil, fmt.Errorf("store: list deny: %w", err)
		}
		e.CreatedAt = fromMillis(created)
		if expires.Valid {
			t := fromMillis(expires.Int64)
			e.ExpiresAt = &t
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list deny: %w", err)
	}
	return out, nil
}

// PruneExpiredDeny deletes the entries that expired before before (the
// retention job: ops.RunRetention). Entries without an expiry stay until
// removed.
func (s *SQL) PruneExpiredDeny(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.rebind(
		`DELETE FROM deny_list WHERE expires_at IS NOT NULL AND expires_at < ?`), before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("store: prune expired deny entries: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: prune expired deny entries: %w", err)
	}
	return n, nil
}
