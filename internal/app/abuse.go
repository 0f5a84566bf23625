package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guarded"
	"github.com/otpguard/otpguard/internal/ops"
)

// The attack view (GET /ops/abuse, the top of /ops): a recorder that
// counts the OTP rules' events and adds them to Redis every second, and a
// reader, both through the Fallback's breaker and timeout like the other
// advisory users of Redis (internal/guarded).

// abuseView is the attack view's recorder (with its flusher) and reader.
type abuseView struct {
	recorder *ops.AbuseRecorder
	desk     *ops.AbuseDesk
}

// startAbuseView starts the recorder's flusher; the returned stop flushes
// once more and waits for it. The reader shows the limits of policy as
// the overrides this instance enforces tighten them, as a send meets them;
// both count and show each service of services (the policy file's in
// force) apart.
func startAbuseView(g guarded.Store, policy func() guard.OTPPolicy, services func() []guard.Service, overrides guard.Overrides,
	deny *ops.DenyCache, now func() time.Time, log *slog.Logger) (*abuseView, func()) {
	if now == nil {
		now = time.Now
	}
	v := &abuseView{
		recorder: ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: g, Policy: policy, Services: services, Now: now, Logger: log}),
		desk: ops.NewAbuseDesk(ops.AbuseDeskOptions{Store: g, Policy: policy, Services: services, Overrides: overrides, Deny: deny,
			Now: now}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.recorder.Run(ctx) })
	return v, func() { cancel(); wg.Wait() }
}
