package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// AddOverride stores an emergency override (see ops.OverrideList) and
// returns it with its ID and its times as stored (milliseconds). The caller
// has validated it (ops.Desk.AddOverride); the table's checks hold the
// rest.
func (s *SQL) AddOverride(ctx context.Context, o guard.Override) (guard.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if o.CreatedAt.IsZero() {
		o.CreatedAt = s.now()
	}
	o.CreatedAt, o.ExpiresAt = truncMillis(o.CreatedAt), truncMillis(o.ExpiresAt)
	if !o.ExpiresAt.After(o.CreatedAt) {
		return guard.Override{}, problem.Errorf(problem.CodeInvalidRequest, "expires_at must be after created_at")
	}
	err := s.db.QueryRowContext(ctx, s.rebind(
		`INSERT INTO overrides (kind, subject, limit_value, reason, author, created_at, expires_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		string(o.Kind), o.Subject, o.Limit, o.Reason, o.Author, o.CreatedAt.UnixMilli(), o.ExpiresAt.UnixMilli(),
	).Scan(&o.ID)
	if err != nil {
		return guard.Override{}, fmt.Errorf("store: add override %s %s: %w", o.Kind, guard.MaskPhone(o.Subject), err)
	}
	return o, nil
}

// RemoveOverride deletes the override id, live or expired;
// guard.ErrNotFound when there is none.
func (s *SQL) RemoveOverride(ctx context.Context, id int64) (guard.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var (
		o                guard.Override
		created, expires int64
	)
	err := s.db.QueryRowContext(ctx, s.rebind(
		`DELETE FROM overrides WHERE id = ?
		 RETURNING id, kind, subject, limit_value, reason, author, created_at, expires_at`), id,
	).Scan(&o.ID, &o.Kind, &o.Subject, &o.Limit, &o.Reason, &o.Author, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return guard.Override{}, fmt.Errorf("store: remove override %d: %w", id, guard.ErrNotFound)
	}
	if err != nil {
		return guard.Override{}, fmt.Errorf("store: remove override %d: %w", id, err)
	}
	o.CreatedAt, o.ExpiresAt = fromMillis(created), fromMillis(expires)
	return o, nil
}

// ListOverrides returns the overrides that have not expired at now, oldest
// first. Expired rows stay in the table, never returned.
func (s *SQL) ListOverrides(ctx context.Context, now time.Time) ([]guard.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.rebind(
		`SELECT id, kind, subject, limit_value, reason, author, created_at, expires_at
		 FROM overrides WHERE expires_at > ? ORDER BY id`), now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: list overrides: %w", err)
	}
	defer rows.Close()
	out := []guard.Override{}
	for rows.Next() {
		var (
			o                guard.Override
			created, expires int64
		)
		if err := rows.Scan(&o.ID, &o.Kind, &o.Subject, &o.Limit, &o.Reason, &o.Author, &created, &expires); err != nil {
			return nil, fmt.Errorf("store: list overrides: %w", err)
		}
		o.CreatedAt, o.ExpiresAt = fromMillis(created), fromMillis(expires)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list overrides: %w", err)
	}
	return out, nil
}
