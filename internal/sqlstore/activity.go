package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/ops"
)

var _ ops.Activity = (*SQL)(nil)

// CountActivity counts the otp.send and otp.verify events in [since, until)
// per minute, action and outcome, for the ops page's chart. The database
// groups them (through the index on at), so an hour of heavy traffic is a
// few hundred rows, not a million.
func (s *SQL) CountActivity(ctx context.Context, since, until time.Time) ([]ops.ActivityCount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// at / 60000 is integer division on both engines (BIGINT, INTEGER).
	rows, err := s.db.QueryContext(ctx, s.rebind(
		`SELECT at / 60000 AS minute, action, outcome, COUNT(*)
		 FROM audit_events
		 WHERE at >= ? AND at < ? AND action IN ('otp.send', 'otp.verify')
		 GROUP BY at / 60000, action, outcome
		 ORDER BY minute`),
		since.UnixMilli(), until.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("store: count activity: %w", err)
	}
	defer rows.Close()
	out := []ops.ActivityCount{}
	for rows.Next() {
		var (
			c      ops.ActivityCount
			minute int64
		)
		if err := rows.Scan(&minute, &c.Action, &c.Outcome, &c.N); err != nil {
			return nil, fmt.Errorf("store: count activity: %w", err)
		}
		c.Minute = fromMillis(minute * 60000)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count activity: %w", err)
	}
	return out, nil
}
