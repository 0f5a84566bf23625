package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

var _ ops.ServiceActivity = (*SQL)(nil)

// CountByService counts the codes sent (otp.send, sent) and the right
// codes checked (otp.verify, valid) in [since, until) per service, for the
// ops page's services. The database groups them through the index on at,
// so a day is one range scan and a handful of rows back, one per service
// and action.
func (s *SQL) CountByService(ctx context.Context, since, until time.Time) ([]ops.ServiceCount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.rebind(
		`SELECT service, action, COUNT(*)
		 FROM audit_events
		 WHERE at >= ? AND at < ?
		   AND ((action = ? AND outcome = ?) OR (action = ? AND outcome = ?))
		 GROUP BY service, action
		 ORDER BY service`),
		since.UnixMilli(), until.UnixMilli(),
		guard.ActionOTPSend, guard.OutcomeSent, guard.ActionOTPVerify, guard.OutcomeValid)
	if err != nil {
		return nil, fmt.Errorf("store: count by service: %w", err)
	}
	defer rows.Close()
	out := []ops.ServiceCount{}
	for rows.Next() {
		var (
			service, action string
			n               int64
		)
		if err := rows.Scan(&service, &action, &n); err != nil {
			return nil, fmt.Errorf("store: count by service: %w", err)
		}
		// Rows come ordered by service: one ServiceCount per service.
		if len(out) == 0 || out[len(out)-1].Service != service {
			out = append(out, ops.ServiceCount{Service: service})
		}
		if action == guard.ActionOTPSend {
			out[len(out)-1].Sends = n
		} else {
			out[len(out)-1].Verified = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count by service: %w", err)
	}
	return out, nil
}
