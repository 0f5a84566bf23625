package app

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
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/store"
)

// startupTimeout bounds each start-up step against Redis: generous, unlike
// the per-request timeout, because a slow first dial is not an outage.
const startupTimeout = 5 * time.Second

// Shutdown timing. drainTimeout is how long Run waits for requests in
// flight: longer than the SMS provider's own timeout (10 s, sms.Twilio),
// so that a send waiting on a hung provider ends by that timeout, with its
// outcome (provider_unavailable) recorded, before the drain gives up. What
// is still running after the drain is cut: its context is cancelled, and
// it gets cutGrace to record its outcome and answer.
const (
	drainTimeout = 15 * time.Second
	cutGrace     = 2 * time.Second
)

// App is one running otpguard instance: the HTTP handler and everything
// behind it (Redis, the fallback, the ops side, the hot keys), wired once,
// here, for the binary and for every test that boots the service.
type App struct {
	cfg     *Config
	log     *slog.Logger
	rdb     redis.UniversalClient
	store   *store.Redis
	outage  *outage
	ops     *opsStack
	live    *live // the policy in force and its reloads (reload.go)
	abuse   *abuseView
	handler http.Handler
	// closers run in reverse order of registration by Close.
	closers []func()
	closed  bool
	// closeErr is what Close reports: set by closers that lost something.
	closeErr error
}

// Option changes how New wires the service; tests use them to put fakes
// where the outside world is.
type Option func(*options)

type options struct {
	sender     guard.Sender
	rdb        redis.UniversalClient
	now        func() time.Time
	output     io.Writer
	heartbeat  store.HeartbeatOptions
	breaker    guard.BreakerOptions
	probeEvery time.Duration
	signIn     ops.SignInLimit
	apiKeys    ops.SignInLimit
	// tracerProvider (WithTracerProvider) and sqlTracer (what the ops
	// database traces with) are tracing.go's.
	tracerProvider trace.TracerProvider
	sqlTracer      trace.TracerProvider

	idempotencyWait time.Duration // idempotency.go
	// policy is the OTP policy in force, for the ops desk's overrides (set
	// by New, not by an Option).
	policy  func() guard.OTPPolicy
	version string // metrics.go
}

// WithSender sends SMS through s instead of the configured sender.
func WithSender(s guard.Sender) Option { return func(o *options) { o.sender = s } }

// WithRedis uses rdb instead of connecting as cfg says. The App does not
// close it.
func WithRedis(rdb redis.UniversalClient) Option { return func(o *options) { o.rdb = rdb } }

// WithClock gives the OTP rules, the fallback and the ops desk their time
// from now instead of time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithOutput writes the JSON log and the console sender's messages to w
// (os.Stdout by default).
func WithOutput(w io.Writer) Option { return func(o *options) { o.output = w } }

// WithHeartbeat sets how often this instance beats and when a silent one
// is forgotten (store.HeartbeatOptions' Every and StaleAfter).
func WithHeartbeat(every, staleAfter time.Duration) Option {
	return func(o *options) { o.heartbeat.Every, o.heartbeat.StaleAfter = every, staleAfter }
}

// WithProbe sets how often the probe pings Redis (guard.DefaultProbeEvery
// otherwise).
func WithProbe(every time.Duration) Option { return func(o *options) { o.probeEvery = every } }

// WithBreaker tunes the breaker in front of Redis.
func WithBreaker(b guard.BreakerOptions) Option { return func(o *options) { o.breaker = b } }

// WithSignInLimit sets the limit on failed ops sign-ins per address
// (ops.DefaultSignInLimit otherwise).
func WithSignInLimit(l ops.SignInLimit) Option { return func(o *options) { o.signIn = l } }

// WithAPIKeyLimit sets the limit on wrong API keys per address
// (ops.DefaultAPIKeyLimit otherwise).
func WithAPIKeyLimit(l ops.SignInLimit) Option { return func(o *options) { o.apiKeys = l } }

// New builds the service cfg describes: it connects to Redis (or starts
// the embedded one), opens and migrates the SQL store, and starts the
// heartbeat, the ops jobs and the hot-key syncs. In embedded mode it fills
// in the secrets cfg leaves unset. Close releases what New started.
func New(ctx context.Context, cfg *Config, opts ...Option) (_ *App, err error) {
	o := options{output: os.Stdout}
	for _, opt := range opts {
		opt(&o)
	}
	a := &App{cfg: cfg, log: newLogger(o.output, cfg.LogLevel)}
	defer func() {
		if err != nil { // undo what was started, last first
			a.Close()
		}
	}()
	log := a.log
	if cfg.Embedded() && o.rdb == nil {
		if err := fillEmbeddedSecrets(cfg, log); err != nil {
			return nil, err
		}
		if err := fillEmbeddedOpsKey(cfg, log); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(o.sender != nil); err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	// First, so that its flush at Close runs last (tracing.go).
	tr, err := startTracing(ctx, cfg, &o, log, a.onClose)
	if err != nil {
		return nil, err
	}
	o.sqlTracer = tr.sqlTracer()

	if o.rdb != nil {
		a.rdb = o.rdb
	} else {
		rdb, closeRedis, err := connectRedis(ctx, cfg, log)
		if err != nil {
			return nil, err
		}
		a.rdb = rdb
		a.onClose(closeRedis)
	}
	metricSet := metrics.New()
	a.rdb.AddHook(store.TimingHook(metricSet.ObserveRedis))
	if err := tr.instrumentRedis(a.rdb); err != nil {
		return nil, err
	}
	if cfg.RedisPipelines > 0 {
		// After the timing hook: it times each command as its caller waits.
		// A pipeline out for half the decision budget lets the next one
		// go beside it: commands behind a slow reply still go out in time.
		_, stop := store.Coalesce(a.rdb, store.CoalesceOptions{Pipelines: cfg.RedisPipelines,
			Stall: cfg.RedisTimeout / 2, Timeout: cfg.maxWait()})
		a.onClose(stop)
	}
	a.store = store.NewRedis(a.rdb, cfg.RedisPrefix)
	if cfg.Redis.Mode == store.RedisCluster { // batches split per hash slot
		a.store = store.NewClusterRedis(a.rdb, cfg.RedisPrefix)
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	err = a.store.LoadScripts(sctx)
	cancel()
	if err != nil {
		// Not fatal: a script missing from the cache is sent with EVAL.
		log.Warn("could not preload the Lua scripts; they load on first use", "err", err)
	}
	guard.WarmPhoneMetadata()
	// Every decision reaches Redis through the Fallback (outage.go).
	if a.outage, err = newOutage(cfg, a.rdb, a.store, o, log); err != nil {
		return nil, err
	}
	registerOutage(metricSet.Registry, a.outage)
	a.onClose(a.outage.start(ctx, log))
	guarded := guardedStore{fb: a.outage.fallback, st: a.store}
	o.policy = func() guard.OTPPolicy { return a.live.policy().OTP }
	if a.ops, err = startOps(ctx, cfg, log, metricSet, guarded, a.store, o); err != nil {
		return nil, err
	}
	a.onClose(func() { a.closeErr = errors.Join(a.closeErr, a.ops.Close()) })

	sender, provider := o.sender, "custom"
	if sender == nil {
		if sender, err = newSender(cfg, o.output, tr.smsTransport()); err != nil {
			return nil, err
		}
		provider = cfg.SMS
	}
	sender = sms.Timed(sender, metricSet.ProviderCalls(provider, sms.Outcomes()))
	abuseMetrics := metrics.NewAbuse(metricSet)
	// The attack view (GET /ops/abuse): the OTP rules' events are
	// tallied per hour in Redis beside the audit trail.
	abuse, stopAbuse := startAbuseView(guarded, o.policy, a.ops.overrides, a.ops.deny, o.now, log)
	a.onClose(stopAbuse)
	a.abuse = abuse
	// The hot keys stop first in Close, once Run has drained the requests
	// that spend hot-key counts: their last sync sees all of them, and Redis
	// and the heartbeat are still there for it.
	hot, stopHot, err := startHotKeys(ctx, cfg, a.rdb, a.outage.fallback.Instances, log)
	if err != nil {
		return nil, err
	}
	a.onClose(stopHot)
	if hot != nil {
		registerHotKeys(metricSet.Registry, hot)
	}
	// What the policy decides is built here, once per policy: at start and
	// at every reload (reload.go), around the long-lived parts.
	a.live = newLive(cfg, log, metricSet, func(p guard.Policies) httpapi.Services {
		otp := guard.NewOTP(guard.OTPOptions{
			Policy: p.OTP, Counter: a.outage.fallback, Codes: a.outage.fallback,
			Sender: sender, HMACKey: cfg.HMACKey, Logger: log, LastStoreFailure: a.outage.fallback.LastFailure,
			Deny: a.ops.deny, Events: ops.Tee(a.ops.audit, abuse.recorder), Blocks: guarded, Now: o.now,
			// The conversion watch is advisory: through the breaker, but its
			// failures never refuse a send.
			Conversions: guarded, AutoBlock: a.ops.desk, Abuse: abuseMetrics.Hooks(),
			// Replayed status callbacks: advisory too (a failed check records).
			Deliveries: a.store,
			// The country velocity rule's count goes out with the send's
			// limits, through the Fallback (Fallback.TakeSend); Volumes is
			// asked directly for its refunds, verify credits and quarantines
			// (guard/velocity.go says how it meets a failing store).
			Volumes: a.store,
			// GET and cancel of a verification: through the breaker.
			Verifications: guarded,
			// The ops desk's emergency overrides tighten the file (ops/overrides.go).
			Overrides: a.ops.overrides,
		})
		// Exact denials are repeated from memory until they expire: a hammered
		// key costs Redis nothing while it stays denied. Remembered per policy:
		// a reload that raises a limit lets the key through at once.
		limiter := guard.NewLimiter(p.Limits, a.outage.fallback, log).
			WithDenials(guard.NewDenials(guard.DefaultDenials, o.now))
		if hot != nil {
			limiter.WithHotKeys(hot)
		}
		return httpapi.Services{OTP: otp, Limiter: limiter}
	})
	first := a.live.build(cfg.Policies)
	a.live.setOTP(first.OTP)
	registerWatch(metricSet.Registry, a.live.otp)
	// Runs before the ops jobs stop (closers run last first): the watch's
	// last alerts still reach the audit queue, Redis and the deny-list.
	a.onClose(func() { a.live.otp().Close() })
	registerRequestMetrics(metricSet, abuseMetrics, cfg, o.version, a.live.otp)
	rdb := a.rdb
	srv := httpapi.New(httpapi.Options{
		OTP: first.OTP, Limiter: first.Limiter, APIKeys: cfg.APIKeys, OpsKeys: cfg.OpsKeys,
		Logger: log, Metrics: metricSet, Spec: api.OpenAPI,
		Ops: a.ops.desk, SessionKey: a.ops.sessionKey, Sessions: a.ops.signOuts,
		Ready: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		Status: func() httpapi.StoreStatus {
			st := a.outage.status()
			db := a.ops.status()
			st.Database = &db
			st.PolicyFile = a.policyStatus()
			return st
		},
		// The abuse defences (README.md, "Abuse defences").
		AbuseMetrics: abuseMetrics, StatusCallback: statusCallback(cfg), MaxInFlight: cfg.MaxInFlight,
		TrustedProxies: cfg.TrustedProxies,
		// Wrong keys are counted per address in Redis, through the Fallback.
		SignIn:      ops.NewSignInLimiter(a.outage.fallback, o.signIn),
		APIKeyLimit: ops.NewAPIKeyLimiter(a.outage.fallback, o.apiKeys),
		// Idempotency-Key claims and answers: through the breaker.
		Idempotency: guarded, IdempotencyWait: o.idempotencyWait,
		// The attack view (GET /ops/abuse, the top of /ops).
		Abuse: abuse.desk,
	})
	a.live.server = srv
	a.handler = tr.handler(srv)
	return a, nil
}

// onClose registers f to run at Close, before what was registered earlier.
func (a *App) onClose(f func()) { a.closers = append(a.closers, f) }

// Handler is the service's HTTP handler: the API, the ops desk, /metrics
// and the health probes.
func (a *App) Handler() http.Handler { return a.handler }

// Logger is the service's JSON logger.
func (a *App) Logger() *slog.Logger { return a.log }

// Fallback is what every decision goes through on its way to Redis.
func (a *App) Fallback() *guard.Fallback { return a.outage.fallback }

// Heartbeat is this instance's heartbeat, which counts live instances.
func (a *App) Heartbeat() *store.Heartbeat { return a.outage.hb }

// Store is the Redis store behind the Fallback.
func (a *App) Store() *store.Redis { return a.store }

// Redis is the client every decision uses.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// FlushAbuse adds what this instance counted for the attack view to Redis
// now, instead of at the next second (tests).
func (a *App) FlushAbuse(ctx context.Context) error { return a.abuse.recorder.Flush(ctx) }

// Ops is the ops desk: deny-list, blocks and the audit trail.
func (a *App) Ops() *ops.Desk { return a.ops.desk }

// SQL is the ops database (deny-list, audit trail, sign-outs); nil until
// this instance has connected to it.
func (a *App) SQL() *store.SQL { return a.ops.db.sql.Load() }

// SignOuts is this instance's copy of the ops sign-outs.
func (a *App) SignOuts() *ops.SignOuts { return a.ops.signOuts }

// DenyCache is this instance's copy of the deny-list.
func (a *App) DenyCache() *ops.DenyCache { return a.ops.deny }

// AuditQueue is this instance's queue of audit events on their way to SQL.
func (a *App) AuditQueue() *ops.AuditQueue { return a.ops.audit }

// OpsSessionKey is the key that signs ops sessions, derived from the HMAC
// key so that every instance accepts every other's sessions.
func (a *App) OpsSessionKey() []byte { return a.ops.sessionKey }

// Run serves the handler on cfg.Addr until ctx ends, then finishes the
// requests in flight (for at most drainTimeout), cuts what is left (see
// drainTimeout) and returns. Call Close after it. It returns an error only
// when serving failed or a request would not stop even when cut.
func (a *App) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Addr, err)
	}
	// Requests run on base, not on ctx: cancelling ctx starts the drain,
	// cancelling base cuts what the drain did not finish.
	base, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	a.log.Info("listening", "addr", ln.Addr().String(), "url", "http://"+ln.Addr().String())
	if a.cfg.DebugAddr != "" {
		stopDebug, err := a.serveDebug(a.cfg.DebugAddr)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopDebug()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down: finishing requests in flight", "at_most", drainTimeout.String())
	if err := a.drain(srv, cut); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	a.log.Info("stopped")
	return nil
}

// drain waits drainTimeout for the requests in flight, then cuts them and
// waits cutGrace more for them to record their outcome and answer.
func (a *App) drain(srv *http.Server, cut context.CancelFunc) error {
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	err := srv.Shutdown(dctx)
	cancel()
	if err == nil {
		return nil
	}
	a.log.Warn("shutdown: requests still running after the drain; cutting them", "drain", drainTimeout.String())
	cut()
	gctx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	// A second Shutdown may also report the listener closed by the first:
	// only a request still running is a failure.
	if err := srv.Shutdown(gctx); errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		return fmt.Errorf("shutdown: requests did not stop even when cut: %w", err)
	}
	return nil
}

// Close stops what New started, last started first: the hot keys (a last
// sync), the ops jobs (the audit queue is flushed), the heartbeat (a
// leave), then Redis. It is safe to call more than once. It returns an
// error when something was lost on the way: audit events the database did
// not take in time (they are counted in otpguard_audit_dropped_total too).
func (a *App) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	return a.closeErr
}

// connectRedis connects to Redis as configured (single, cluster or
// sentinel; config_redis.go), or starts the embedded
// miniredis, and checks the server can run otpguard's commands.
func connectRedis(ctx context.Context, cfg *Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	redis.SetLogger(redisLog{log}) // go-redis has one logger per process: the last App's
	if cfg.Embedded() {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, nil, fmt.Errorf("embedded redis: %w", err)
		}
		log.Warn("EMBEDDED REDIS: limits live in this process only and are NOT shared between instances; set OTPGUARD_REDIS_URL for production",
			"redis", "miniredis")
		stopClock := driveClock(m, 10*time.Millisecond)
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: "redis://" + m.Addr(), Timeout: cfg.RedisTimeout, MaxWait: cfg.maxWait()})
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

func newSender(cfg *Config, stdout io.Writer, transport http.RoundTripper) (guard.Sender, error) {
	if cfg.SMS != "twilio" { // console, or unset in embedded mode
		return sms.NewConsole(stdout), nil
	}
	return newTwilio(cfg, transport)
}

// newTwilio builds the Twilio sender; transport nil is the default one.
func newTwilio(cfg *Config, transport http.RoundTripper) (*sms.Twilio, error) {
	return sms.NewTwilio(sms.TwilioOptions{
		AccountSID: cfg.Twilio.AccountSID, AuthToken: cfg.Twilio.AuthToken,
		From: cfg.Twilio.From, MessagingServiceSID: cfg.Twilio.MessagingServiceSID,
		BaseURL: cfg.Twilio.BaseURL, StatusCallback: cfg.Twilio.StatusCallback, Transport: transport,
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
// nil (the route answers 404) unless Twilio sends with a status callback.
func statusCallback(cfg *Config) httpapi.StatusCallback {
	if cfg.SMS != "twilio" || cfg.Twilio.StatusCallback == "" || cfg.Twilio.AuthToken == "" {
		return nil
	}
	return sms.TwilioCallback{URL: cfg.Twilio.StatusCallback, AuthToken: cfg.Twilio.AuthToken}
}
