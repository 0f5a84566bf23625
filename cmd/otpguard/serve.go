package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/store"
)

// startupTimeout bounds each start-up step against Redis: generous, unlike
// the per-request budget, because a slow first dial is not an outage.
const startupTimeout = 5 * time.Second

// serve wires the configuration into a running server and blocks until
// ctx is cancelled, then shuts down gracefully.
func serve(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	log := newLogger(stdout, cfg.LogLevel)
	if cfg.Embedded() {
		if err := fillEmbeddedSecrets(cfg, log); err != nil {
			return err
		}
		if err := fillEmbeddedOpsKey(cfg, log); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}

	rdb, closeRedis, err := connectRedis(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	metrics := httpapi.NewMetrics()
	rdb.AddHook(store.TimingHook(metrics.ObserveRedis))
	redisStore := store.NewRedis(rdb, cfg.RedisPrefix)
	if cfg.Redis.Mode == store.RedisCluster { // batches split per hash slot
		redisStore = store.NewClusterRedis(rdb, cfg.RedisPrefix)
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	err = redisStore.LoadScripts(sctx)
	cancel()
	if err != nil {
		// Not fatal: a script missing from the cache is sent with EVAL.
		log.Warn("could not preload the Lua scripts; they load on first use", "err", err)
	}
	guard.WarmPhoneMetadata()
	// Every decision reaches Redis through the Fallback (outage.go).
	out := newOutage(cfg, rdb, redisStore, metrics, log)
	stopOutage := out.start(ctx, log)
	defer stopOutage()
	ops, err := startOps(ctx, cfg, log, metrics, redisStore, out.fallback)
	if err != nil {
		return err
	}
	defer ops.Close()

	sender, err := newSender(cfg, stdout)
	if err != nil {
		return err
	}
	abuseMetrics := httpapi.NewAbuseMetrics(metrics)
	otp := guard.NewOTP(guard.OTPOptions{
		Policy: cfg.Policies.OTP, Counter: out.fallback, Codes: out.fallback,
		Sender: sender, HMACKey: cfg.HMACKey, Logger: log, StoreFailedAt: out.fallback.LastFailure,
		Deny: ops.deny, Events: ops.audit, Blocks: redisStore,
		// The conversion watch is advisory: straight to Redis, not through
		// the Fallback (its failures never refuse a send).
		Conversions: redisStore, AutoBlock: ops.desk, Abuse: abuseMetrics.Hooks(),
	})
	limiter := guard.NewLimiter(cfg.Policies.Limits, out.fallback, log)
	// stopHot is deferred last so that it runs first, once listenAndServe
	// has drained the requests that spend hot-key counts: their last sync
	// sees all of them, and Redis and the heartbeat are still there for it.
	hot, stopHot, err := startHotKeys(ctx, cfg, rdb, out.fallback.Instances, metrics, log)
	if err != nil {
		return err
	}
	defer stopHot()
	if hot != nil {
		limiter.WithHotKeys(hot)
	}
	handler := httpapi.New(httpapi.Options{
		OTP: otp, Limiter: limiter, APIKeys: cfg.APIKeys, OpsKeys: cfg.OpsKeys,
		Logger: log, Metrics: metrics, Spec: api.OpenAPI,
		Ops: ops.desk, SessionKey: ops.sessionKey, Sessions: redisStore,
		Ready:  func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Status: out.status,
		// The abuse defences (README.md, "Abuse defences").
		AbuseMetrics: abuseMetrics, StatusCallback: statusCallback(cfg),
	})
	return listenAndServe(ctx, cfg.Addr, handler, log)
}

func listenAndServe(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	log.Info("listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight (at most 10s)")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// connectRedis connects to Redis as configured (single, cluster or
// sentinel; config_redis.go), or starts the embedded
// miniredis, and checks the server can run otpguard's commands.
func connectRedis(ctx context.Context, cfg *Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if cfg.Embedded() {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Warn("EMBEDDED REDIS: limits live in this process only and are NOT shared between instances; set OTPGUARD_REDIS_URL for production",
			"redis", "miniredis")
		stopClock := driveClock(m, 10*time.Millisecond)
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: "redis://" + m.Addr(), Timeout: cfg.RedisTimeout})
		if err != nil {
			stopClock()
			m.Close()
			return nil, nil, err
		}
		return rdb, func() { rdb.Close(); stopClock(); m.Close() }, nil
	}
	rdb, err := store.NewUniversalClient(cfg.redisOptions())
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	switch err := store.CheckRedisVersion(sctx, rdb); {
	case errors.Is(err, store.ErrRedisUnreachable):
		// An instance restarted during an outage must still come up: it
		// serves by each policy's on_store_error until Redis answers (the
		// breaker probes it), and checks nothing it cannot reach.
		log.Error("REDIS UNREACHABLE at start-up: serving by each policy's on_store_error until it answers",
			"redis", cfg.redisTarget(), "err", err)
	case err != nil:
		rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", cfg.redisTarget(), err)
	default:
		log.Info("redis connected", "redis", cfg.redisTarget(), "mode", cfg.Redis.Mode, "timeout", cfg.RedisTimeout.String())
	}
	return rdb, func() { rdb.Close() }, nil
}

// driveClock makes the embedded Redis keep time. miniredis neither
// expires keys nor moves TIME on its own: told nothing, a 30 s cooldown
// would never end. Every tick the clock is set to now (TIME, PEXPIRETIME)
// and the TTLs are moved forward as much, so both agree to the tick.
func driveClock(m *miniredis.Miniredis, tick time.Duration) (stop func()) {
	last := time.Now()
	m.SetTime(last)
	t := time.NewTicker(tick)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				m.SetTime(now)
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { t.Stop(); close(done) }
}

// fillEmbeddedSecrets makes up what embedded mode may leave unset: an API
// key (printed, so the walk-through works) and an HMAC key (random: codes
// die with the process, as the embedded Redis does).
func fillEmbeddedSecrets(cfg *Config, log *slog.Logger) error {
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

func newSender(cfg *Config, stdout io.Writer) (guard.Sender, error) {
	if cfg.SMS == "console" {
		return sms.NewConsole(stdout), nil
	}
	return sms.NewTwilio(sms.TwilioOptions{
		AccountSID: cfg.Twilio.AccountSID, AuthToken: cfg.Twilio.AuthToken,
		From: cfg.Twilio.From, MessagingServiceSID: cfg.Twilio.MessagingServiceSID,
		BaseURL: cfg.Twilio.BaseURL, StatusCallback: cfg.Twilio.StatusCallback,
	})
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// redactURL hides the password of a redis:// URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// statusCallback is what POST /sms/status checks Twilio's signature with;
// zero (the route answers 404) unless Twilio sends with a status callback.
func statusCallback(cfg *Config) httpapi.StatusCallback {
	if cfg.SMS != "twilio" {
		return httpapi.StatusCallback{}
	}
	return httpapi.StatusCallback{URL: cfg.Twilio.StatusCallback, AuthToken: cfg.Twilio.AuthToken}
}
