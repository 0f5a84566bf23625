package guarded

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
)

// The attack view (GET /ops/abuse, the top of /ops): its recorder adds the
// OTP rules' events to Redis every second and its reader reads them, both
// through the breaker of the master that holds the view.

var _ ops.AbuseCounters = Store{}

// abuseKey names the attack view's hash tag (store/abuse.go: every key of
// it in one slot), whose master's breaker its calls go through.
var abuseKey = limit.Key{Space: "ops:abuse", ID: "abuse", Name: "alerts"}

func (g Store) AddAbuse(ctx context.Context, counts []ops.AbuseCounts, alerts []ops.AbuseAlert, now time.Time) error {
	return g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) error { return g.st.AbuseCounters.AddAbuse(ctx, counts, alerts, now) })
}

func (g Store) ReadAbuse(ctx context.Context, hours []int64) (ops.AbuseData, error) {
	var d ops.AbuseData
	err := g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) (err error) {
		d, err = g.st.AbuseCounters.ReadAbuse(ctx, hours)
		return err
	})
	if err != nil {
		return ops.AbuseData{}, err
	}
	return d, nil
}

func (g Store) ReadVolumes(ctx context.Context, regions []string, hour int64) ([]ops.CountryVolume, error) {
	var vs []ops.CountryVolume
	err := g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) (err error) {
		vs, err = g.st.AbuseCounters.ReadVolumes(ctx, regions, hour)
		return err
	})
	if err != nil {
		return nil, err
	}
	return vs, nil
}

func (g Store) ReadSolvedCaps(ctx context.Context, takes []guard.VolumeTake) ([]ops.SolvedCap, error) {
	var cs []ops.SolvedCap
	err := g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) (err error) {
		cs, err = g.st.AbuseCounters.ReadSolvedCaps(ctx, takes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return cs, nil
}
