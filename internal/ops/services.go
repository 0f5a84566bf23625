package ops

import (
	"context"
	"errors"
	"time"
)

// ServiceWindow is how far back the desk counts each service's sends and
// verified checks: a day, long enough to show a quiet service's traffic,
// short enough to be one range of the audit trail's index on at.
const ServiceWindow = 24 * time.Hour

// ServiceCount is one service's sends and verified checks in a window.
type ServiceCount struct {
	// Service is the Verify service SID the events carry; "" for the
	// default service (every /otp/... call, and the Verify calls of the
	// service marked default).
	Service  string
	Sends    int64 // otp.send events that sent a code
	Verified int64 // otp.verify events whose code was right
}

// ServiceActivity counts audit events per service, for the ops page's
// services.
type ServiceActivity interface {
	// CountByService counts the codes sent and the right codes checked in
	// [since, until) per service; services with neither are left out.
	CountByService(ctx context.Context, since, until time.Time) ([]ServiceCount, error)
}

// ServiceCounts returns each service's sends and verified checks over the
// last ServiceWindow, by SID ("" for the default service). A service with
// none is absent: its count is zero.
func (d *Desk) ServiceCounts(ctx context.Context) (map[string]ServiceCount, error) {
	if d.o.ServiceActivity == nil {
		return nil, errors.New("ops: the desk counts no services: DeskOptions.ServiceActivity is not set")
	}
	now := d.o.Now()
	counts, err := d.o.ServiceActivity.CountByService(ctx, now.Add(-ServiceWindow), now.Add(time.Millisecond))
	if err != nil {
		return nil, dbUnavailable(err)
	}
	out := make(map[string]ServiceCount, len(counts))
	for _, c := range counts {
		out[c.Service] = c
	}
	return out, nil
}
