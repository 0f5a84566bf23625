// Package config is what otpguard is told: the settings table (settings.go),
// from which Load, Validate, `config check`, the unknown-setting warning and
// docs/reference.md's table all come, and the policy file's YAML format and
// checks. internal/app builds the service from a Config.
package config

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// Config is everything otpguard is told, parsed once from the environment
// (and the policy file it names). Every field has a working default.
type Config struct {
	Addr string
	// DebugAddr, when set, serves Go's runtime profiles (net/http/pprof)
	// on a listener of its own; loopback only (app/httpserver.go).
	DebugAddr    string
	RedisURL     string // "" = embedded miniredis
	RedisTimeout time.Duration
	// RedisMaxWait is how long a decision may wait for a Redis the probe
	// vouches for, past RedisTimeout, before it is shed as overloaded; 0:
	// max(1s, RedisTimeout) (see MaxWait).
	RedisMaxWait time.Duration
	// RedisPipelines is how many pipelines of coalesced commands may be on
	// the wire at once (store.Coalescer); 0 sends each command on its own.
	RedisPipelines int
	// LimitShards is the hashes per /limits/check policy and time slice
	// that hold the limits (store.Redis.WithLimitShards).
	LimitShards int
	// HTTPServer is what OTPGUARD_HTTP_SERVER asked for: "" or "net/http",
	// the one server (run.go); anything else is refused by Validate.
	HTTPServer string
	// MaxInFlight bounds the decisions (sends, verifies, checks) this
	// instance works on at once; more are shed with 503 overloaded.
	MaxInFlight int
	RedisPrefix string
	APIKeys     []string
	OpsKeys     []string
	HMACKey     []byte
	// SMS is console or twilio; "" (OTPGUARD_SMS unset) is the console
	// sender in embedded mode and refused with a shared Redis, where a
	// console sender would silently print codes instead of sending them.
	SMS        string
	Twilio     TwilioConfig
	Captcha    CaptchaConfig
	Risk       RiskConfig
	ConfigFile string
	LogLevel   string
	// LogAllowedChecks: one allowed /limits/check answer in N is logged at
	// info, the others at debug (httpapi.Options.LogAllowedChecks).
	LogAllowedChecks int

	Policies guard.Policies

	// Instances (OTPGUARD_INSTANCES) fixes N, the live instance count the
	// split limits divide by; 0 learns it from heartbeats in Redis.
	Instances int

	// Redis says how to reach a Redis Cluster or Sentinel (redis.go);
	// a single server is RedisURL.
	Redis RedisConfig

	// DatabaseURL and DataDir say where the SQL store lives.
	DatabaseURL string
	DataDir     string
	AutoMigrate bool
	// AuditRetention is how long audit events are kept; DenyListRefresh
	// how often each instance reloads the deny-list.
	AuditRetention  time.Duration
	DenyListRefresh time.Duration
	// DatabaseTimeout bounds every SQL call, and all the SQL calls of one
	// ops request together (OTPGUARD_DATABASE_TIMEOUT).
	DatabaseTimeout time.Duration

	// TrustedProxies (OTPGUARD_TRUSTED_PROXIES) are the proxies whose
	// X-Forwarded-For or X-Real-IP is believed; none: the peer address is
	// the client.
	TrustedProxies []netip.Prefix

	// Tracing is what the OTEL_* variables say about traces (tracing.go).
	Tracing TracingConfig

	// Envoy is the gRPC listener for Envoy's rate-limit filter and the
	// rules it decides by (envoy.go).
	Envoy EnvoyConfig

	// Generated is set for secrets made up at start-up in embedded mode.
	GeneratedAPIKey bool

	// Warnings are said at start-up (logged by New, printed by config
	// check): e.g. UnknownSettings; AllWarnings adds those of the settings.
	Warnings []string

	// otel is what the OTEL_* variables say, as given; Tracing is what
	// they mean together (tracing.go).
	otel otelEnv
}

// TwilioConfig holds the Twilio account used when SMS is "twilio".
type TwilioConfig struct {
	AccountSID          string
	AuthToken           string
	From                string
	MessagingServiceSID string
	BaseURL             string
	StatusCallback      string
	// The other channels' senders (channels.go): a channel is on when
	// its settings are set.
	WhatsAppFrom       string
	WhatsAppContentSID string
	VoiceFrom          string
}

// Options is the Twilio sender's options for this account; transport nil
// is the default one.
func (t TwilioConfig) Options(transport http.RoundTripper) sms.TwilioOptions {
	return sms.TwilioOptions{
		AccountSID: t.AccountSID, AuthToken: t.AuthToken,
		From: t.From, MessagingServiceSID: t.MessagingServiceSID,
		BaseURL: t.BaseURL, StatusCallback: t.StatusCallback, Transport: transport,
	}
}

// Embedded reports whether otpguard runs on its in-process Redis.
func (c *Config) Embedded() bool { return c.RedisURL == "" && c.Redis.Mode == "single" }

// MaxWait is RedisMaxWait, or its default: max(1s, RedisTimeout).
func (c *Config) MaxWait() time.Duration {
	if c.RedisMaxWait > 0 {
		return c.RedisMaxWait
	}
	return max(time.Second, c.RedisTimeout)
}

// DefaultRedisPipelines is how many coalesced pipelines an instance may
// have on the wire at once. One goes out at a time (the commands arriving
// meanwhile share the next); more only beside one out for half of
// OTPGUARD_REDIS_TIMEOUT, so that a slow reply holds up nothing else.
const DefaultRedisPipelines = 4

// DefaultMaxInFlight is how many decisions an instance works on at once
// unless OTPGUARD_MAX_IN_FLIGHT says otherwise: enough to keep Redis busy
// from a 2-core host, few enough that a burst waits in the kernel's accept
// queue or is shed at once instead of queueing inside otpguard, where every
// waiting decision stretches every other's round trip.
const DefaultMaxInFlight = 256

// DefaultLogAllowedChecks is one allowed /limits/check logged at info in
// 100: a line per decision costs a noticeable share of a check's CPU
// (docs/benchmarks.md) for lines that say nothing the metrics do not.
// Refusals and errors are always logged.
const DefaultLogAllowedChecks = 100

// Load reads the environment through getenv: every setting in the
// list (settings.go), then what the OTEL_* variables mean together and the
// policy file OTPGUARD_CONFIG names. Secrets may come from files:
// OTPGUARD_HMAC_KEY_FILE instead of OTPGUARD_HMAC_KEY, and so for the API
// and ops keys, the Redis and database URLs (which may hold a password),
// the Redis password and the Twilio token.
func Load(getenv func(string) string) (*Config, error) {
	c := &Config{}
	errs := []error{parseSettings(c, getenv)}
	var err error
	if c.Tracing, err = c.otel.tracing(); err != nil {
		errs = append(errs, err)
	}
	if c.Policies, err = LoadPolicies(c.ConfigFile); err != nil {
		errs = append(errs, err)
	}
	if c.Envoy.Path != "" {
		if c.Envoy.Rules, err = ReadEnvoyRules(c.Envoy.Path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every setting and their combinations: what production
// mode requires, and that each choice has what it needs. `otpguard config
// check` runs it, so that it finds every mistake serve would.
func (c *Config) Validate() error { return c.ValidateWithSender(false) }

// ValidateWithSender is Validate for a service whose SMS sender the caller
// may supply (senderGiven: app.WithSender), so that OTPGUARD_SMS may then be
// left unset. Each setting's own check runs first (settings.go), then the
// combinations.
func (c *Config) ValidateWithSender(senderGiven bool) error {
	var errs []error
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if err := s.check(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	for _, check := range []func() error{
		c.checkSharedRedisSecrets,
		c.checkKeyLengths,
		c.checkOpsKeysApart,
		c.checkSingleRedis,
		c.checkRedisNodes,
		func() error { return c.checkSenderChosen(senderGiven) },
		c.checkTwilio,
		c.checkPolicies,
		c.checkCaptcha,
		c.checkEnvoy,
	} {
		errs = append(errs, check())
	}
	return errors.Join(errs...)
}

// complaints gathers what one check finds.
type complaints []error

func (cs *complaints) add(format string, args ...any) { *cs = append(*cs, fmt.Errorf(format, args...)) }

func (cs complaints) err() error { return errors.Join(cs...) }

// checkSharedRedisSecrets: instances that share a Redis must share their
// keys, so none may be made up at start-up.
func (c *Config) checkSharedRedisSecrets() error {
	var cs complaints
	if c.Embedded() {
		return nil
	}
	if len(c.APIKeys) == 0 {
		cs.add("OTPGUARD_API_KEYS: required with a shared Redis (OTPGUARD_REDIS_URL or OTPGUARD_REDIS_MODE; comma-separated bearer keys)")
	}
	if len(c.HMACKey) == 0 {
		cs.add("OTPGUARD_HMAC_KEY: required with a shared Redis (OTPGUARD_REDIS_URL or OTPGUARD_REDIS_MODE; every instance must hash codes alike)")
	}
	return cs.err()
}

// checkKeyLengths: every API and ops key, counted across both lists.
func (c *Config) checkKeyLengths() error {
	var cs complaints
	for i, k := range append(slices.Clone(c.APIKeys), c.OpsKeys...) {
		if len(k) < 16 {
			cs.add("OTPGUARD_API_KEYS/OTPGUARD_OPS_KEYS: key %d is shorter than 16 characters", i+1)
		}
	}
	return cs.err()
}

// checkOpsKeysApart: an ops key opens the desk; a caller's key must not.
func (c *Config) checkOpsKeysApart() error {
	var cs complaints
	for _, k := range c.OpsKeys {
		for _, a := range c.APIKeys {
			if k == a {
				cs.add("OTPGUARD_OPS_KEYS: an ops key must not also be an API key")
			}
		}
	}
	return cs.err()
}

// checkSenderChosen: with a shared Redis, the console sender would print
// codes instead of sending them, so it is never the silent default.
func (c *Config) checkSenderChosen(senderGiven bool) error {
	if c.SMS == "" && !c.Embedded() && !senderGiven {
		return errors.New("OTPGUARD_SMS: required with a shared Redis: set twilio to send codes, or console to print them on standard output (development only)")
	}
	return nil
}

// checkTwilio: OTPGUARD_SMS=twilio has an account, a token and one sender.
func (c *Config) checkTwilio() error {
	if c.SMS != "twilio" {
		return nil
	}
	var cs complaints
	t := c.Twilio
	if t.AccountSID == "" || t.AuthToken == "" {
		cs.add("TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN: required with OTPGUARD_SMS=twilio")
	}
	if (t.From == "") == (t.MessagingServiceSID == "") {
		cs.add("TWILIO_FROM or TWILIO_MESSAGING_SERVICE_SID: set exactly one with OTPGUARD_SMS=twilio")
	} else if t.AccountSID != "" && t.AuthToken != "" {
		if _, err := sms.NewTwilio(t.Options(nil)); err != nil { // its numbers and URLs
			cs = append(cs, err)
		}
	}
	cs = append(cs, t.checkChannels()...)
	return cs.err()
}

// checkPolicies: the policy file (or the defaults) as a whole.
func (c *Config) checkPolicies() error {
	if err := c.Policies.Validate(); err != nil {
		return fmt.Errorf("policy file %s: %w", or(c.ConfigFile, "(defaults)"), err)
	}
	if err := guard.ValidateServiceChannels(c.Policies.Services, c.Channels()); err != nil {
		return fmt.Errorf("policy file %s: %w", or(c.ConfigFile, "(defaults)"), err)
	}
	return c.checkFallback()
}

// maxConfigFile bounds the size of each configuration file otpguard reads:
// the policy file and every file of the Envoy rules.
const maxConfigFile = 1 << 20

// readConfigFile reads a configuration file (the policy file, an Envoy rule
// file) if it is a regular file (or a link to one) of at most
// maxConfigFile bytes. It opens without blocking and looks before it
// reads: a FIFO would block this and every later reload (and the shutdown
// that waits for it), and /dev/zero would fill memory.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (mode %s)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("%s is larger than 1 MiB: not a configuration file", path)
	}
	return b, nil
}

// LoadPolicies reads the YAML policy file at path over the defaults
// (policyfile.go); "" is the defaults. Start-up and every reload read it so.
func LoadPolicies(path string) (guard.Policies, error) {
	if path == "" {
		return guard.DefaultPolicies(), nil
	}
	b, err := readConfigFile(path)
	if err != nil {
		return guard.DefaultPolicies(), fmt.Errorf("OTPGUARD_CONFIG: %w", err)
	}
	p, err := decodePolicies(b)
	if err != nil {
		return p, fmt.Errorf("OTPGUARD_CONFIG %s: %w", path, err)
	}
	return p, nil
}

// Describe writes what `otpguard config check` prints: where Redis and the
// SMS go, then the effective policies as YAML.
func (c *Config) Describe(w io.Writer) error {
	redis := c.RedisTarget()
	if c.Embedded() {
		redis = "embedded (miniredis, not shared between instances)"
	}
	fmt.Fprintf(w, "# configuration is valid\n# redis: %s\n# sms: %s\n", redis, or(c.SMS, "console"))
	fmt.Fprintf(w, "# channels: %s\n", strings.Join(c.Channels(), ", "))
	fmt.Fprintf(w, "# tracing: %s\n", c.Tracing.describe())
	for _, warn := range c.AllWarnings() {
		fmt.Fprintf(w, "# warning: %s\n", warn)
	}
	if warn := c.RiskWarning(false); warn != "" {
		fmt.Fprintf(w, "# warning: %s\n", warn)
	}
	return encodePolicies(w, c.Policies)
}

// AllWarnings is what serve logs at start-up and config check prints, from
// one list: Warnings (e.g. UnknownSettings), then what the settings
// themselves deserve a word on. Embedded mode makes up its ops key and is
// one instance by design, so neither of these concerns it.
func (c *Config) AllWarnings() []string {
	out := slices.Clone(c.Warnings)
	if c.Embedded() {
		return out
	}
	if len(c.OpsKeys) == 0 {
		out = append(out, "no OTPGUARD_OPS_KEYS set: the ops page and /ops API refuse everyone")
	}
	if c.DatabaseURL == "" {
		out = append(out, "ops database is a local SQLite file: instances do not share the deny-list or the audit trail; set OTPGUARD_DATABASE_URL (PostgreSQL) when running several")
	}
	return out
}

// DatabaseLabel names the ops database for logs, without secrets: the
// SQLite file, or the redacted URL.
func (c *Config) DatabaseLabel() string {
	if c.DatabaseURL == "" {
		return filepath.Join(c.DataDir, sqlstore.SQLiteFile)
	}
	return redactURL(c.DatabaseURL)
}

// redactURL hides the password of a redis:// URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
