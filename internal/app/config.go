package app

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/store"
)

// Config is everything otpguard is told, parsed once from the environment
// (and the policy file it names). Every field has a working default.
type Config struct {
	Addr string
	// DebugAddr, when set, serves Go's runtime profiles (net/http/pprof)
	// on a listener of its own; loopback only (debug.go).
	DebugAddr    string
	RedisURL     string // "" = embedded miniredis
	RedisTimeout time.Duration
	// RedisMaxWait is how long a decision may wait for a Redis the probe
	// vouches for, past RedisTimeout, before it is shed as overloaded; 0:
	// max(1s, RedisTimeout) (see maxWait).
	RedisMaxWait time.Duration
	// RedisPipelines is how many pipelines of coalesced commands may be on
	// the wire at once (store.Coalescer); 0 sends each command on its own.
	RedisPipelines int
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
	ConfigFile string
	LogLevel   string
	Policies   guard.Policies

	// Instances (OTPGUARD_INSTANCES) fixes N, the live instance count the
	// split limits divide by; 0 learns it from heartbeats in Redis.
	Instances int

	// Redis says how to reach a Redis Cluster or Sentinel (config_redis.go);
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
	// DatabaseTimeout bounds every SQL call (OTPGUARD_DATABASE_TIMEOUT).
	DatabaseTimeout time.Duration

	// TrustedProxies (OTPGUARD_TRUSTED_PROXIES) are the proxies whose
	// X-Forwarded-For or X-Real-IP is believed; none: the peer address is
	// the client.
	TrustedProxies []netip.Prefix

	// Tracing is what the OTEL_* variables say about traces (tracing.go).
	Tracing TracingConfig

	// Generated is set for secrets made up at start-up in embedded mode.
	GeneratedAPIKey bool

	// Warnings are said at start-up (logged by New, printed by config
	// check): e.g. UnknownSettings.
	Warnings []string

	// settings are the variable names LoadConfig read: the ones otpguard
	// knows (UnknownSettings).
	settings map[string]bool
}

// TwilioConfig holds the Twilio account used when SMS is "twilio".
type TwilioConfig struct {
	AccountSID          string
	AuthToken           string
	From                string
	MessagingServiceSID string
	BaseURL             string
	StatusCallback      string
}

// Embedded reports whether otpguard runs on its in-process Redis.
func (c *Config) Embedded() bool { return c.RedisURL == "" && c.Redis.Mode == "single" }

// maxWait is RedisMaxWait, or its default: max(1s, RedisTimeout).
func (c *Config) maxWait() time.Duration {
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

// LoadConfig reads the environment through getenv. Secrets may come from
// files: OTPGUARD_HMAC_KEY_FILE instead of OTPGUARD_HMAC_KEY, and so for
// the API and ops keys, the Redis and database URLs (which may hold a
// password) and the Twilio token.
//
// Every variable is read here, set or not: the names read are the ones
// otpguard knows (UnknownSettings warns of the others).
func LoadConfig(getenv func(string) string) (*Config, error) {
	var errs []error
	settings := map[string]bool{}
	lookup := getenv
	getenv = func(name string) string { settings[name] = true; return lookup(name) }
	secretOf := func(name string) string {
		v, err := secret(getenv, name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	c := &Config{
		settings:    settings,
		Addr:        or(getenv("OTPGUARD_ADDR"), "127.0.0.1:8080"),
		DebugAddr:   getenv("OTPGUARD_DEBUG_ADDR"),
		RedisURL:    secretOf("OTPGUARD_REDIS_URL"),
		RedisPrefix: or(getenv("OTPGUARD_REDIS_PREFIX"), "og:"),
		SMS:         getenv("OTPGUARD_SMS"),
		ConfigFile:  getenv("OTPGUARD_CONFIG"),
		LogLevel:    or(getenv("OTPGUARD_LOG_LEVEL"), "info"),
		DatabaseURL: secretOf("OTPGUARD_DATABASE_URL"),
		DataDir:     or(getenv("OTPGUARD_DATA_DIR"), "./data"),
		APIKeys:     splitList(secretOf("OTPGUARD_API_KEYS")),
		OpsKeys:     splitList(secretOf("OTPGUARD_OPS_KEYS")),
		Twilio: TwilioConfig{
			AccountSID:          getenv("TWILIO_ACCOUNT_SID"),
			From:                getenv("TWILIO_FROM"),
			MessagingServiceSID: getenv("TWILIO_MESSAGING_SERVICE_SID"),
			BaseURL:             getenv("TWILIO_API_BASE_URL"),
			StatusCallback:      getenv("TWILIO_STATUS_CALLBACK_URL"),
		},
	}
	var err error
	if c.Redis, err = loadRedisConfig(getenv); err != nil {
		errs = append(errs, err)
	}
	// The embedded Redis lives in this process: it cannot be partitioned
	// away, and a slow call there means a starved CPU, not an outage.
	redisTimeout := 10 * time.Millisecond
	if c.Embedded() {
		redisTimeout = time.Second
	}
	if c.RedisTimeout, err = durationEnv(getenv, "OTPGUARD_REDIS_TIMEOUT", redisTimeout); err != nil {
		errs = append(errs, err)
	}
	if c.RedisMaxWait, err = durationEnv(getenv, "OTPGUARD_REDIS_MAX_WAIT", 0); err != nil {
		errs = append(errs, err)
	}
	c.RedisPipelines = DefaultRedisPipelines
	if v := getenv("OTPGUARD_REDIS_PIPELINES"); v != "" {
		if c.RedisPipelines, err = strconv.Atoi(v); err != nil {
			errs = append(errs, fmt.Errorf("OTPGUARD_REDIS_PIPELINES: %q is not a whole number", v))
		}
	}
	c.MaxInFlight = DefaultMaxInFlight
	if v := getenv("OTPGUARD_MAX_IN_FLIGHT"); v != "" {
		if c.MaxInFlight, err = strconv.Atoi(v); err != nil {
			errs = append(errs, fmt.Errorf("OTPGUARD_MAX_IN_FLIGHT: %q is not a whole number", v))
		}
	}
	if v := getenv("OTPGUARD_INSTANCES"); v != "" {
		if c.Instances, err = strconv.Atoi(v); err != nil {
			errs = append(errs, fmt.Errorf("OTPGUARD_INSTANCES: %q is not a whole number", v))
		}
	}
	if c.AutoMigrate, err = boolEnv(getenv, "OTPGUARD_AUTO_MIGRATE", true); err != nil {
		errs = append(errs, err)
	}
	if c.AuditRetention, err = durationEnv(getenv, "OTPGUARD_AUDIT_RETENTION", ops.DefaultAuditRetention); err != nil {
		errs = append(errs, err)
	}
	if c.DenyListRefresh, err = durationEnv(getenv, "OTPGUARD_DENYLIST_REFRESH", ops.DefaultDenyRefresh); err != nil {
		errs = append(errs, err)
	}
	if c.TrustedProxies, err = prefixList(getenv, "OTPGUARD_TRUSTED_PROXIES"); err != nil {
		errs = append(errs, err)
	}
	if c.DatabaseTimeout, err = durationEnv(getenv, "OTPGUARD_DATABASE_TIMEOUT", store.DefaultSQLTimeout); err != nil {
		errs = append(errs, err)
	}
	c.HMACKey = []byte(secretOf("OTPGUARD_HMAC_KEY"))
	c.Twilio.AuthToken = secretOf("TWILIO_AUTH_TOKEN")
	if c.Tracing, err = loadTracingConfig(getenv); err != nil {
		errs = append(errs, err)
	}
	if c.Policies, err = loadPolicies(c.ConfigFile); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every setting and their combinations: what production
// mode requires, and that each choice has what it needs. `otpguard config
// check` runs it, so that it finds every mistake serve would.
func (c *Config) Validate() error { return c.validate(false) }

// validate is Validate; senderGiven says the SMS sender is supplied by the
// caller (app.WithSender), so OTPGUARD_SMS may be left unset.
func (c *Config) validate(senderGiven bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.RedisTimeout < time.Millisecond || c.RedisTimeout > 10*time.Second {
		bad("OTPGUARD_REDIS_TIMEOUT: must be between 1ms and 10s, got %s", c.RedisTimeout)
	}
	if c.RedisMaxWait != 0 && (c.RedisMaxWait < c.RedisTimeout || c.RedisMaxWait > time.Minute) {
		bad("OTPGUARD_REDIS_MAX_WAIT: must be between OTPGUARD_REDIS_TIMEOUT (%s) and 1m, got %s", c.RedisTimeout, c.RedisMaxWait)
	}
	if c.RedisPipelines < 0 || c.RedisPipelines > 1024 {
		bad("OTPGUARD_REDIS_PIPELINES: must be between 0 (no coalescing) and 1024, got %d", c.RedisPipelines)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 100_000 {
		bad("OTPGUARD_MAX_IN_FLIGHT: must be between 1 and 100000, got %d", c.MaxInFlight)
	}
	if c.Instances < 0 || c.Instances > 10_000 {
		bad("OTPGUARD_INSTANCES: must be between 1 and 10000 (or unset: counted by heartbeat), got %d", c.Instances)
	}
	errs = append(errs, c.validateRedis()...)
	if !c.Embedded() {
		if len(c.APIKeys) == 0 {
			bad("OTPGUARD_API_KEYS: required with a shared Redis (OTPGUARD_REDIS_URL or OTPGUARD_REDIS_MODE; comma-separated bearer keys)")
		}
		if len(c.HMACKey) == 0 {
			bad("OTPGUARD_HMAC_KEY: required with a shared Redis (OTPGUARD_REDIS_URL or OTPGUARD_REDIS_MODE; every instance must hash codes alike)")
		}
	}
	if c.AuditRetention < time.Hour {
		bad("OTPGUARD_AUDIT_RETENTION: must be at least 1h, got %s", c.AuditRetention)
	}
	if c.DenyListRefresh < 100*time.Millisecond || c.DenyListRefresh > time.Minute {
		bad("OTPGUARD_DENYLIST_REFRESH: must be between 100ms and 1m, got %s", c.DenyListRefresh)
	}
	if c.DatabaseTimeout < 10*time.Millisecond || c.DatabaseTimeout > time.Minute {
		bad("OTPGUARD_DATABASE_TIMEOUT: must be between 10ms and 1m, got %s", c.DatabaseTimeout)
	}
	if len(c.HMACKey) > 0 && len(c.HMACKey) < 32 {
		bad("OTPGUARD_HMAC_KEY: must be at least 32 bytes, got %d", len(c.HMACKey))
	}
	for i, k := range append(append([]string(nil), c.APIKeys...), c.OpsKeys...) {
		if len(k) < 16 {
			bad("OTPGUARD_API_KEYS/OTPGUARD_OPS_KEYS: key %d is shorter than 16 characters", i+1)
		}
	}
	for _, k := range c.OpsKeys {
		for _, a := range c.APIKeys {
			if k == a {
				bad("OTPGUARD_OPS_KEYS: an ops key must not also be an API key")
			}
		}
	}
	if err := checkAddr(c.Addr); err != nil {
		bad("OTPGUARD_ADDR: %v", err)
	}
	if c.DebugAddr != "" {
		if err := checkDebugAddr(c.DebugAddr); err != nil {
			bad("OTPGUARD_DEBUG_ADDR: %v", err)
		}
	}
	if c.RedisURL != "" {
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			// The URL may hold a password: only the parser's reason is shown.
			bad("OTPGUARD_REDIS_URL: not a redis:// or rediss:// URL (%s)", urlProblem(err))
		}
	}
	if err := store.CheckDatabaseURL(c.DatabaseURL); err != nil {
		bad("OTPGUARD_DATABASE_URL: %v", err)
	}
	if c.DatabaseURL == "" {
		if fi, err := os.Stat(c.DataDir); err == nil && !fi.IsDir() {
			bad("OTPGUARD_DATA_DIR: %s is a file, not a directory", c.DataDir)
		}
	}
	switch c.SMS {
	case "":
		if !c.Embedded() && !senderGiven {
			bad("OTPGUARD_SMS: required with a shared Redis: set twilio to send codes, or console to print them on standard output (development only)")
		}
	case "console":
	case "twilio":
		t := c.Twilio
		if t.AccountSID == "" || t.AuthToken == "" {
			bad("TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN: required with OTPGUARD_SMS=twilio")
		}
		if (t.From == "") == (t.MessagingServiceSID == "") {
			bad("TWILIO_FROM or TWILIO_MESSAGING_SERVICE_SID: set exactly one with OTPGUARD_SMS=twilio")
		} else if t.AccountSID != "" && t.AuthToken != "" {
			if _, err := newTwilio(c, nil); err != nil { // its numbers and URLs
				errs = append(errs, err)
			}
		}
	default:
		bad("OTPGUARD_SMS: must be console or twilio, got %q", c.SMS)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("OTPGUARD_LOG_LEVEL: must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if err := c.Policies.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("policy file %s: %w", or(c.ConfigFile, "(defaults)"), err))
	}
	return errors.Join(errs...)
}

// loadPolicies reads the YAML policy file over the defaults (policyfile.go).
func loadPolicies(path string) (guard.Policies, error) {
	if path == "" {
		return guard.DefaultPolicies(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return guard.DefaultPolicies(), fmt.Errorf("OTPGUARD_CONFIG: %w", err)
	}
	p, err := decodePolicies(b)
	if err != nil {
		return p, fmt.Errorf("OTPGUARD_CONFIG %s: %w", path, err)
	}
	return p, nil
}

func secret(getenv func(string) string, name string) (string, error) {
	v, file := getenv(name), getenv(name+"_FILE")
	switch {
	case v != "" && file != "":
		return "", fmt.Errorf("%s and %s_FILE: set one, not both", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return v, nil
}

func durationEnv(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("%s: %q is not a duration (e.g. 10ms, 1s)", name, v)
	}
	return d, nil
}

func boolEnv(getenv func(string) string, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s: %q is not true or false", name, v)
	}
	return b, nil
}

// prefixList reads a comma-separated list of CIDR prefixes; a bare
// address is a prefix of one address.
func prefixList(getenv func(string) string, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range splitList(getenv(name)) {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%s: %q is not a CIDR prefix (e.g. 10.0.0.0/8, 2001:db8::/32) or an address", name, v)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Describe writes what `otpguard config check` prints: where Redis and the
// SMS go, then the effective policies as YAML.
func (c *Config) Describe(w io.Writer) error {
	redis := c.redisTarget()
	if c.Embedded() {
		redis = "embedded (miniredis, not shared between instances)"
	}
	fmt.Fprintf(w, "# configuration is valid\n# redis: %s\n# sms: %s\n", redis, or(c.SMS, "console"))
	fmt.Fprintf(w, "# tracing: %s\n", c.Tracing.describe())
	for _, warn := range c.Warnings {
		fmt.Fprintf(w, "# warning: %s\n", warn)
	}
	return encodePolicies(w, c.Policies)
}
