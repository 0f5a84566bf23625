package app

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guarded"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/verifyapi"
)

// wiring is New's steps, each a method, and what they hand on to the
// ones after them; the App (a) keeps what outlives New.
type wiring struct {
	a            *App
	o            options
	tr           *tracing
	metrics      *metrics.Set
	abuseMetrics *metrics.Abuse
	guarded      guarded.Store // the store through the breaker
	sender       guard.Sender
	channels     []string            // the channels sender offers (sms.Channels.Offers)
	hot          *resilience.HotKeys // nil: no limit syncs its counts
	first        httpapi.Services    // what the policy at start-up decides
	// captchaCalls bounds the CAPTCHA provider's calls under way, every policy's.
	captchaCalls *challenge.ProviderCalls
	// riskLookup answers otp.risk's lookups (nil: none, the rule is off),
	// every policy's; riskHooks count them (risk.go).
	riskLookup guard.RiskLookup
	riskHooks  guard.RiskHooks
}

// checkConfig fills in what embedded mode may leave unset, refuses a
// configuration serve could not honour, and says its warnings.
func (w *wiring) checkConfig(_ context.Context) error {
	a := w.a
	cfg, log := a.cfg, a.log
	if cfg.Embedded() && w.o.rdb == nil {
		if err := fillEmbeddedSecrets(cfg, log); err != nil {
			return err
		}
		if err := fillEmbeddedOpsKey(cfg, log); err != nil {
			return err
		}
	}
	if err := cfg.ValidateWithSender(w.o.sender != nil); err != nil {
		return err
	}
	for _, warn := range cfg.AllWarnings() {
		log.Warn(warn)
	}
	return nil
}

// setUpTracing starts the tracer provider the OTEL_* variables ask for
// (tracing.go).
func (w *wiring) setUpTracing(ctx context.Context) error {
	a := w.a
	tr, err := startTracing(ctx, a.cfg, &w.o, a.log, a.onClose)
	if err != nil {
		return err
	}
	w.tr, w.o.sqlTracer = tr, tr.sqlTracer()
	return nil
}

// startFallback puts the Fallback between every decision and Redis
// (outage.go) and starts its probe and heartbeat, which run until Close:
// through the drain, and for the writers that flush after it.
func (w *wiring) startFallback(ctx context.Context) (err error) {
	a := w.a
	guard.WarmPhoneMetadata()
	if a.outage, err = newOutage(a.cfg, a.rdb, a.store, w.o, a.log); err != nil {
		return err
	}
	registerOutage(w.metrics.Registry, a.outage)
	a.onClose(a.outage.start(ctx, a.log))
	w.guarded = guarded.New(a.outage.fallback, a.store)
	w.o.policy = func() guard.OTPPolicy { return a.live.policy().OTP }
	return nil
}

// openOpsDesk connects the SQL store and starts the ops jobs (ops.go).
func (w *wiring) openOpsDesk(ctx context.Context) (err error) {
	a := w.a
	if a.ops, err = startOps(ctx, a.cfg, a.log, w.metrics, w.guarded, a.store.Sessions, w.o); err != nil {
		return err
	}
	a.onClose(func() { a.closeErr = errors.Join(a.closeErr, a.ops.Close()) })
	return nil
}

// watchAbuse starts the attack view (GET /ops/abuse): the OTP rules'
// events are tallied per hour in Redis beside the audit trail.
func (w *wiring) watchAbuse(_ context.Context) error {
	a := w.a
	abuse, stop := startAbuseView(w.guarded, w.o.policy, func() []guard.Service { return a.live.policy().Services }, a.ops.overrides, a.ops.deny, w.o.now, a.log)
	a.onClose(stop)
	a.abuse = abuse
	return nil
}

// syncHotKeys starts the hot keys' syncs. They stop first in Close, once
// Run has drained the requests that spend hot-key counts: their last sync
// sees all of them, and Redis and the heartbeat are still there for it.
func (w *wiring) syncHotKeys(ctx context.Context) error {
	a := w.a
	hot, stop, err := startHotKeys(ctx, a.cfg, a.rdb, a.outage.fallback.Instances, a.log)
	if err != nil {
		return err
	}
	a.onClose(stop)
	if hot != nil {
		registerHotKeys(w.metrics.Registry, hot)
	}
	w.hot = hot
	return nil
}

// buildGuard builds what the policy decides, once per policy: at start
// and at every reload (reload.go), around the long-lived parts.
func (w *wiring) buildGuard(_ context.Context) error {
	a := w.a
	w.captchaCalls = challenge.NewProviderCalls(a.cfg.CaptchaCalls())
	a.live = newLive(a.cfg, a.log, w.metrics, func(p guard.Policies) (httpapi.Services, error) {
		// The services' secrets first: a file that cannot be read keeps
		// the policy in force (a reload) or stops the start.
		tenants, err := verifyapi.NewTenants(p.Services, config.ReadSecretFile)
		if err != nil {
			return httpapi.Services{}, err
		}
		// A service's channels are some of those the senders offer.
		if err := guard.ValidateServiceChannels(p.Services, w.channels); err != nil {
			return httpapi.Services{}, err
		}
		return httpapi.Services{OTP: w.newOTP(p.OTP, p.Services), Limiter: w.newLimiter(p.Limits), Tenants: tenants}, nil
	})
	first, err := a.live.build(a.cfg.Policies)
	if err != nil {
		return fmt.Errorf("app: policy services: %w", err)
	}
	w.first = first
	a.live.setOTP(w.first.OTP)
	registerWatch(w.metrics.Registry, a.live.otp)
	// Runs before the ops jobs stop (closers run last first): the watch's
	// last alerts still reach the audit queue, Redis and the deny-list.
	a.onClose(func() { a.live.otp().Close() })
	registerRequestMetrics(w.metrics, w.abuseMetrics, a.cfg, a.live.otp)
	return nil
}

// newOTP is the OTP rules of one policy: the deployment's otp: and its
// services' overlays.
func (w *wiring) newOTP(p guard.OTPPolicy, services []guard.Service) *guard.OTP {
	a := w.a
	fb := a.outage.fallback
	if p.Risk.Mode == guard.RiskOn && w.riskLookup == nil && w.first.OTP != nil {
		// A reload turned otp.risk on; start-up warned of its own policy.
		a.log.Warn("reloaded otp.risk.mode is on but no risk lookup is available: the risk score stays off")
	}
	return guard.NewOTP(guard.OTPOptions{
		Policy: p, Counter: fb, Codes: fb,
		Sender: w.sender, Channels: w.channels, Services: services, HMACKey: a.cfg.HMACKey, Logger: a.log, LastStoreFailure: fb.LastFailure,
		Deny: a.ops.deny, Events: ops.Tee(a.ops.audit, a.abuse.recorder), Blocks: w.guarded, Now: w.o.now,
		// The conversion watch is advisory: through the breaker, but its
		// failures never refuse a send.
		Conversions: w.guarded, AutoBlock: a.ops.desk, Abuse: w.abuseMetrics.Hooks(),
		// Replayed status callbacks: advisory too (a failed check records).
		Deliveries: a.store.Deliveries,
		// The country velocity rule's count goes out with the send's
		// limits, through the Fallback (Fallback.TakeSend); Volumes is
		// asked directly for its refunds, verify credits and quarantines
		// (guard/velocity.go says how it meets a failing store).
		Volumes: a.store.Velocity,
		// GET and cancel of a verification: through the breaker.
		Verifications: w.guarded,
		// The number search's read of a live code: through the breaker.
		CodeStates: w.guarded,
		// The ops desk's emergency overrides tighten the file (ops/overrides.go).
		Overrides: a.ops.overrides,
		// otp.challenge: a challenge before an automatic refusal (challenge.go).
		Challenger: newChallenger(a.cfg, p.Challenge, w.captchaCalls),
		// Trusted numbers' marks: read with the velocity count in the
		// send's round trip; written at each verify and by imports,
		// through the breaker.
		Trusts: w.guarded,
		// otp.risk: the network's risk score, asked where a send would be
		// challenged; its cache is read by the velocity script with the
		// count, and on its own straight from the store (risk.go).
		RiskLookup: w.riskLookup, Risks: a.store.Risks, RiskHooks: w.riskHooks,
	})
}

// newLimiter is the named limits of one policy. Exact denials are
// repeated from memory until they expire: a hammered key costs Redis
// nothing while it stays denied. Remembered per policy: a reload that
// raises a limit lets the key through at once.
func (w *wiring) newLimiter(limits map[string]limit.Policy) *limit.Limiter {
	a := w.a
	a.outage.fallback.AddPolicies(limits) // their series in otpguard_fallback_decisions_total
	limiter := limit.New(limits, a.outage.fallback, a.log).
		WithDenials(limit.NewDenials(limit.DefaultDenials, w.o.now))
	if w.hot != nil {
		limiter.WithHotKeys(w.hot)
	}
	return limiter
}

// boundInFlight builds the one bound on decisions in flight
// (OTPGUARD_MAX_IN_FLIGHT) that the API's routes and Envoy's gRPC service
// share: a flood of either is shed before it takes the other's slots.
func (w *wiring) boundInFlight(_ context.Context) error {
	a := w.a
	a.inFlight = httpapi.NewAdmission(a.cfg.MaxInFlight, w.metrics)
	return nil
}

// buildServer builds the HTTP side: the API, the ops desk's routes,
// /metrics and the probes, traced as the OTEL_* variables say.
func (w *wiring) buildServer(_ context.Context) error {
	a := w.a
	rdb, fb := a.rdb, a.outage.fallback
	srv := httpapi.New(httpapi.Options{
		OTP: w.first.OTP, Limiter: w.first.Limiter, Tenants: w.first.Tenants, APIKeys: a.cfg.APIKeys, OpsKeys: a.cfg.OpsKeys,
		Logger: a.log, LogAllowedChecks: a.cfg.LogAllowedChecks, Metrics: w.metrics, Spec: api.OpenAPI,
		Ops: a.ops.desk, SessionKey: a.ops.sessionKey, Sessions: a.ops.signOuts,
		Ready:  readyCheck(rdb),
		Status: a.storeStatus,
		// The abuse defences (README.md, "Abuse defences").
		AbuseMetrics: w.abuseMetrics, StatusCallback: statusCallback(a.cfg), Admission: a.inFlight,
		TrustedProxies: a.cfg.TrustedProxies,
		// Wrong keys are counted per address in Redis, through the Fallback.
		SignIn:      ops.NewSignInLimiter(fb, w.o.signIn),
		APIKeyLimit: ops.NewAPIKeyLimiter(fb, w.o.apiKeys),
		// Idempotency-Key claims and answers: through the breaker.
		Idempotency: w.guarded, IdempotencyWait: w.o.idempotencyWait,
		// The attack view (GET /ops/abuse, the top of /ops).
		Abuse: a.abuse.desk,
	})
	a.live.server = srv
	a.handler = w.tr.handler(srv)
	return nil
}

// storeStatus is what GET /status says of Redis, the database and the
// policy file.
func (a *App) storeStatus() httpapi.StoreStatus {
	st := a.outage.status()
	db := a.ops.status()
	st.Database = &db
	st.PolicyFile = a.policyStatus()
	return st
}

// fillEmbeddedSecrets makes up what embedded mode may leave unset: an API
// key (printed, so the walk-through works) and an HMAC key (random: codes
// die with the process, as the embedded Redis does).
func fillEmbeddedSecrets(cfg *config.Config, log *slog.Logger) error {
	if len(cfg.HMACKey) == 0 {
		cfg.HMACKey = make([]byte, 32)
		if _, err := rand.Read(cfg.HMACKey); err != nil {
			return err
		}
	}
	if len(cfg.APIKeys) == 0 {
		key, err := randomKey("ogk_")
		if err != nil {
			return err
		}
		cfg.APIKeys, cfg.GeneratedAPIKey = []string{key}, true
		log.Warn("no OTPGUARD_API_KEYS set: generated an API key for this run", "api_key", key)
	}
	return nil
}

func randomKey(prefix string) (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}
