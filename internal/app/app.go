package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/store"
)

// startupTimeout bounds each start-up step against Redis: generous, unlike
// the per-request timeout, because a slow first dial is not an outage.
const startupTimeout = 5 * time.Second

// App is one running otpguard instance: the HTTP handler and everything
// behind it (Redis, the fallback, the ops side, the hot keys), wired once,
// here, for the binary and for every test that boots the service.
type App struct {
	cfg     *config.Config
	log     *slog.Logger
	rdb     redis.UniversalClient
	store   *store.Redis
	outage  *outage
	ops     *opsStack
	live    *live      // the policy in force and its reloads (reload.go)
	envoy   *envoyPath // the gRPC service for Envoy; nil when off (envoy.go)
	abuse   *abuseView
	handler http.Handler
	// closers run in reverse order of registration by Close.
	closers []func()
	closed  bool
	// closeErr is what Close reports: set by closers that lost something.
	closeErr error
	// inFlight bounds the decisions in flight, over HTTP and gRPC alike.
	inFlight *httpapi.Admission
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
	breaker    resilience.BreakerOptions
	probeEvery time.Duration
	signIn     ops.SignInLimit
	apiKeys    ops.SignInLimit
	// tracerProvider (WithTracerProvider) and sqlTracer (what the ops
	// database traces with) are tracing.go's.
	tracerProvider trace.TracerProvider
	sqlTracer      trace.TracerProvider

	idempotencyWait time.Duration
	// risk answers otp.risk's lookups instead of Twilio Lookup
	// (WithRiskLookup); nil: the configured client.
	risk guard.RiskLookup
	// policy is the OTP policy in force, for the ops desk's overrides (set
	// by New, not by an Option).
	policy func() guard.OTPPolicy
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

// WithProbe sets how often the probe pings Redis (resilience.DefaultProbeEvery
// otherwise).
func WithProbe(every time.Duration) Option { return func(o *options) { o.probeEvery = every } }

// WithBreaker tunes the breaker in front of Redis.
func WithBreaker(b resilience.BreakerOptions) Option { return func(o *options) { o.breaker = b } }

// WithSignInLimit sets the limit on failed ops sign-ins per address
// (ops.DefaultSignInLimit otherwise).
func WithSignInLimit(l ops.SignInLimit) Option { return func(o *options) { o.signIn = l } }

// WithAPIKeyLimit sets the limit on wrong API keys per address
// (ops.DefaultAPIKeyLimit otherwise).
func WithAPIKeyLimit(l ops.SignInLimit) Option { return func(o *options) { o.apiKeys = l } }

// WithIdempotencyWait sets how long a request with an Idempotency-Key
// waits for the answer of the same request running elsewhere
// (httpapi.DefaultIdempotencyWait otherwise).
func WithIdempotencyWait(d time.Duration) Option { return func(o *options) { o.idempotencyWait = d } }

// WithRiskLookup asks l for the network's risk score of a number (otp.risk)
// instead of Twilio Lookup: the simulator's fake, a test's server.
func WithRiskLookup(l guard.RiskLookup) Option { return func(o *options) { o.risk = l } }

// New builds the service cfg describes: it connects to Redis (or starts
// the embedded one), opens and migrates the SQL store, and starts the
// heartbeat, the ops jobs and the hot-key syncs. In embedded mode it fills
// in the secrets cfg leaves unset. Close releases what New started. Each
// step is in build.go, in this order; each registers what Close undoes.
func New(ctx context.Context, cfg *config.Config, opts ...Option) (_ *App, err error) {
	metricSet := metrics.New()
	w := &wiring{o: options{output: os.Stdout}, metrics: metricSet, abuseMetrics: metrics.NewAbuse(metricSet)}
	for _, opt := range opts {
		opt(&w.o)
	}
	a := &App{cfg: cfg, log: newLogger(w.o.output, cfg.LogLevel)}
	w.a = a
	defer func() {
		if err != nil { // undo what was started, last first
			a.Close()
		}
	}()
	for _, step := range []func(context.Context) error{
		w.checkConfig,
		w.setUpTracing, // first, so that its flush at Close runs last
		w.openRedis,
		w.loadScripts,
		w.startFallback,
		w.openOpsDesk,
		w.buildSender,
		w.buildRiskLookup,
		w.watchAbuse,
		w.syncHotKeys,
		w.buildGuard,
		w.boundInFlight,
		w.buildEnvoy,
		w.buildServer,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
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
func (a *App) Fallback() *resilience.Fallback { return a.outage.fallback }

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
func (a *App) SQL() *sqlstore.SQL { return a.ops.db.SQL() }

// SignOuts is this instance's copy of the ops sign-outs.
func (a *App) SignOuts() *ops.SignOuts { return a.ops.signOuts }

// DenyCache is this instance's copy of the deny-list.
func (a *App) DenyCache() *ops.DenyCache { return a.ops.deny }

// AuditQueue is this instance's queue of audit events on their way to SQL.
func (a *App) AuditQueue() *ops.AuditQueue { return a.ops.audit }

// OpsSessionKey is the key that signs ops sessions, derived from the HMAC
// key so that every instance accepts every other's sessions.
func (a *App) OpsSessionKey() []byte { return a.ops.sessionKey }

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

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
