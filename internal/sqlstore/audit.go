package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

const eventColumns = "at, action, outcome, phone, country, ip, actor, detail, trace_id, request_id, uid, service"

// eventSelect reads eventColumns back; rows written before events had a
// UID hold NULL there.
const eventSelect = "id, at, action, outcome, phone, country, ip, actor, detail, trace_id, request_id, COALESCE(uid, ''), service"

// insertChunk is how many events share one INSERT: few round trips for a
// big batch, and far below either engine's limit on bound parameters
// (12 per row; SQLite allows 32766, PostgreSQL 65535).
const insertChunk = 200

// pruneChunk bounds how many rows one DELETE removes. A huge single delete
// would hold SQLite's only write lock (and the store's only connection)
// for as long as it runs, and leave PostgreSQL one giant transaction.
const pruneChunk = 5000

// WriteEvents stores events in one transaction: all of them or none. An
// event whose UID is stored already is skipped (ON CONFLICT DO NOTHING):
// a retry of a batch whose commit landed but whose answer was lost (a
// timeout) stores nothing twice. An event without a UID is given one
// here, so it is stored, but only the caller's UID makes its retry safe.
func (s *SQL) WriteEvents(ctx context.Context, events []guard.Event) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if len(events) == 0 {
		return nil
	}
	now := s.now()
	for i := range events {
		if events[i].Action == "" {
			return fmt.Errorf("store: write events: event %d has no action", i)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: write events: %w", err)
	}
	defer tx.Rollback() // a no-op once committed

	for start := 0; start < len(events); start += insertChunk {
		chunk := events[start:min(start+insertChunk, len(events))]
		var q strings.Builder
		q.WriteString("INSERT INTO audit_events (" + eventColumns + ") VALUES ")
		args := make([]any, 0, 12*len(chunk))
		for i, e := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			at := e.At
			if at.IsZero() {
				at = now
			}
			uid := e.UID
			if uid == "" {
				uid = guard.NewEventUID()
			}
			args = append(args, at.UnixMilli(), storable(e.Action), storable(e.Outcome), storable(e.Phone),
				storable(e.Country), storable(e.IP), storable(e.Actor), storable(e.Detail), storable(e.TraceID), storable(e.RequestID),
				storable(uid), storable(e.Service))
		}
		q.WriteString(" ON CONFLICT (uid) DO NOTHING")
		if _, err := tx.ExecContext(ctx, s.rebind(q.String()), args...); err != nil {
			return fmt.Errorf("store: write events: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: write events: %w", err)
	}
	return nil
}

// storable makes text safe for both engines: PostgreSQL refuses a NUL or
// invalid UTF-8 (and with it the whole batch, every retry), SQLite keeps
// them. Inputs are validated before they get here; this keeps one odd
// event from stopping the audit trail if a check is ever missed.
func storable(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// ListEvents returns the events matching f, newest (highest ID) first, at
// most f.Limit of them (see ops.EventFilter). Times compare at
// millisecond precision, the precision they are stored with.
func (s *SQL) ListEvents(ctx context.Context, f ops.EventFilter) ([]guard.Event, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var (
		where []string
		args  []any
	)
	if f.Phone != "" {
		where, args = append(where, "phone = ?"), append(args, f.Phone)
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if f.RequestID != "" {
		where, args = append(where, "request_id = ?"), append(args, f.RequestID)
	}
	if f.Service != "" {
		where, args = append(where, "service = ?"), append(args, f.Service)
	}
	if f.DefaultService {
		where = append(where, "service = ''")
	}
	if f.Outcome != "" {
		where, args = append(where, "outcome = ?"), append(args, f.Outcome)
	}
	if f.Country != "" {
		where, args = append(where, "country = ?"), append(args, f.Country)
	}
	if f.PhonePrefix != "" {
		// + and digits only, so no LIKE wildcard can pass; anything else is
		// refused, not dropped, which would list every event as a match.
		if err := guard.ValidateDenyPattern(f.PhonePrefix); err != nil {
			return nil, fmt.Errorf("store: list events: phone prefix: %w", err)
		}
		where, args = append(where, "phone LIKE ?"), append(args, f.PhonePrefix+"%")
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, f.Until.UnixMilli())
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = ops.DefaultEventLimit
	case limit > ops.MaxEventLimit:
		limit = ops.MaxEventLimit
	}

	q := "SELECT " + eventSelect + " FROM audit_events"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)

	rows, err := s.db.QueryContext(ctx, s.rebind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list events: %w", err)
	}
	defer rows.Close()
	out := []guard.Event{}
	for rows.Next() {
		var (
			e  guard.Event
			at int64
		)
		if err := rows.Scan(&e.ID, &at, &e.Action, &e.Outcome, &e.Phone, &e.Country, &e.IP, &e.Actor, &e.Detail, &e.TraceID, &e.RequestID, &e.UID, &e.Service); err != nil {
			return nil, fmt.Errorf("store: list events: %w", err)
		}
		e.At = fromMillis(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list events: %w", err)
	}
	return out, nil
}

// PruneEvents deletes the events older than before, in chunks, and returns
// how many went. On an error the count says how many were already deleted.
func (s *SQL) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	q := s.rebind(`DELETE FROM audit_events WHERE id IN (
		SELECT id FROM audit_events WHERE at < ? ORDER BY id LIMIT ?)`)
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, q, before.UnixMilli(), pruneChunk)
		if err != nil {
			return total, fmt.Errorf("store: prune events: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("store: prune events: %w", err)
		}
		total += n
		if n < pruneChunk {
			return total, nil
		}
	}
}
