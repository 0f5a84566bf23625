package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
)

// The attack view (GET /ops/abuse, the top of /ops): a recorder that
// counts the OTP rules' events and adds them to Redis every second, and a
// reader, both through the Fallback's breaker and timeout like the other
// advisory users of Redis (guarded.go).

var _ ops.AbuseCounters = guardedStore{}

// abuseKey names the attack view's hash tag (store/abuse.go: every key of
// it in one slot), whose master's breaker its calls go through.
var abuseKey = limit.Key{Space: "ops:abuse", ID: "abuse", Name: "alerts"}

func (g guardedStore) AddAbuse(ctx context.Context, counts []ops.AbuseCounts, alerts []ops.AbuseAlert, now time.Time) error {
	return g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) error { return g.st.AddAbuse(ctx, counts, alerts, now) })
}

func (g guardedStore) ReadAbuse(ctx context.Context, hours []int64) (ops.AbuseData, error) {
	var d ops.AbuseData
	err := g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) (err error) {
		d, err = g.st.ReadAbuse(ctx, hours)
		return err
	})
	if err != nil {
		return ops.AbuseData{}, err
	}
	return d, nil
}

func (g guardedStore) ReadVolumes(ctx context.Context, regions []string, hour int64) ([]ops.CountryVolume, error) {
	var vs []ops.CountryVolume
	err := g.fb.DoFor(ctx, abuseKey, func(ctx context.Context) (err error) {
		vs, err = g.st.ReadVolumes(ctx, regions, hour)
		return err
	})
	if err != nil {
		return nil, err
	}
	return vs, nil
}

// abuseView is the attack view's recorder (with its flusher) and reader.
type abuseView struct {
	recorder *ops.AbuseRecorder
	desk     *ops.AbuseDesk
}

// startAbuseView starts the recorder's flusher; the returned stop flushes
// once more and waits for it. The reader shows the limits of policy as
// the overrides this instance enforces tighten them, as a send meets them.
func startAbuseView(g guardedStore, policy func() guard.OTPPolicy, overrides guard.Overrides, deny *ops.DenyCache, now func() time.Time, log *slog.Logger) (*abuseView, func()) {
	if now == nil {
		now = time.Now
	}
	v := &abuseView{
		recorder: ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: g, Policy: policy, Now: now, Logger: log}),
		desk:     ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: g, Policy: policy, Overrides: overrides, Deny: deny, Now: now}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.recorder.Run(ctx) })
	return v, func() { cancel(); wg.Wait() }
}
