package config

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/sms"
	"github.com/otpguard/otpguard/internal/store"
)

//go:generate go test -run TestSettingsReference . -args -update

// setting is one environment variable otpguard reads (miniflux's parser
// style): Load parses it into the Config, Validate runs its check,
// UnknownSettings knows its name, and docs/reference.md's table of
// environment variables is written from it (settings_reference_test.go).
type setting struct {
	name string
	// def is the value in force when the variable is unset, fed to parse
	// as if it were set; "" when the default depends on other settings
	// (parse then decides) or there is none.
	def string
	// defDoc says what the default is when def alone does not: in a
	// sentence, or beside def (e.g. "(30 days)").
	defDoc  string
	example string
	doc     string // one line for the reference table
	// secret: the value may come from a file named by name_FILE instead.
	secret bool
	// parse puts the value (def when unset) into the Config; nil for a
	// variable that the OpenTelemetry SDK reads itself, listed for the
	// reference only.
	parse func(c *Config, v string) error
	// check is what Validate says of the parsed value, on its own or
	// against a setting listed before it; nil: anything parse accepts.
	check func(c *Config) error
}

// settings are every variable otpguard reads, in the order of the
// reference table. Order matters to parse: a default that depends on
// another setting (OTPGUARD_REDIS_TIMEOUT's on the Redis mode) comes after it.
var settings = []setting{
	{name: "OTPGUARD_ADDR", def: "127.0.0.1:8080", example: "0.0.0.0:8080",
		doc:   "listen address",
		parse: text(func(c *Config) *string { return &c.Addr }), check: checkListenAddr},
	{name: "OTPGUARD_HTTP_SERVER", def: "net/http", example: "net/http",
		doc:   "the API listener's HTTP/1.1 server: only `net/http` (Go's, serving echo for every route; README, \"HTTP server\"); `fasthttp` is refused at start-up",
		parse: text(func(c *Config) *string { return &c.HTTPServer }), check: checkHTTPServer},
	{name: "OTPGUARD_DEBUG_ADDR", defDoc: "unset: off", example: "127.0.0.1:6060",
		doc:   "serve Go's runtime profiles (`net/http/pprof`) on a listener of their own, loopback only (they have no authentication): `go tool pprof 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'`; the API's listener never offers them",
		parse: text(func(c *Config) *string { return &c.DebugAddr }), check: checkDebugListenAddr},
	{name: "OTPGUARD_API_KEYS", secret: true, defDoc: "generated and printed in embedded mode; **required** with a shared Redis", example: "k1-...,k2-...",
		doc:   "callers' bearer keys, comma-separated, 16+ characters each",
		parse: list(func(c *Config) *[]string { return &c.APIKeys })},
	{name: "OTPGUARD_OPS_KEYS", secret: true, defDoc: "generated and printed in embedded mode; else none (ops closed)", example: "ops-k1-...,ops-k2-...",
		doc:   "bearer keys for `/ops` and the ops page, 16+ characters; never also an API key",
		parse: list(func(c *Config) *[]string { return &c.OpsKeys })},
	{name: "OTPGUARD_HMAC_KEY", secret: true, defDoc: "random per run in embedded mode; **required** with a shared Redis", example: "OTPGUARD_HMAC_KEY_FILE=/run/secrets/otpguard_hmac",
		doc:   "secret for code HMACs, stateless codes and ops sessions; 32+ bytes; the same on every instance",
		parse: func(c *Config, v string) error { c.HMACKey = []byte(v); return nil }, check: checkHMACKeyLength},
	{name: "OTPGUARD_CONFIG", defDoc: "none (built-in policies)", example: "/etc/otpguard/policies.yaml",
		doc:   "the policy file; read again on `SIGHUP`",
		parse: text(func(c *Config) *string { return &c.ConfigFile })},
	{name: "OTPGUARD_GRPC_ADDR", defDoc: "unset: off", example: "10.0.0.5:8081",
		doc:   "listen address of the Envoy rate-limit gRPC service (`envoy.service.ratelimit.v3.RateLimitService`, health checking, reflection); expose it to the gateways only ([docs/envoy.md](envoy.md))",
		parse: text(func(c *Config) *string { return &c.Envoy.Server.Addr }), check: checkGRPCAddr},
	{name: "OTPGUARD_ENVOY_CONFIG", defDoc: "none; **required** with `OTPGUARD_GRPC_ADDR`", example: "/etc/ratelimit/config",
		doc:   "envoyproxy/ratelimit's YAML rules, read as that service reads them: one file, or the `.yaml`/`.yml` files under a directory; read again on `SIGHUP`",
		parse: text(func(c *Config) *string { return &c.Envoy.Path })},
	{name: "OTPGUARD_GRPC_TLS_CERT_FILE", defDoc: "unset: plaintext", example: "/etc/otpguard/grpc.pem",
		doc:   "TLS certificate (PEM) of the gRPC listener; with the next, TLS on",
		parse: text(func(c *Config) *string { return &c.Envoy.Server.CertFile })},
	{name: "OTPGUARD_GRPC_TLS_KEY_FILE", example: "/etc/otpguard/grpc.key",
		doc:   "its private key (PEM)",
		parse: text(func(c *Config) *string { return &c.Envoy.Server.KeyFile })},
	{name: "OTPGUARD_GRPC_CLIENT_CA_FILE", defDoc: "unset: no client certificate asked", example: "/etc/otpguard/gateways-ca.pem",
		doc:   "mTLS: a gateway must present a certificate this CA (PEM) signed",
		parse: text(func(c *Config) *string { return &c.Envoy.Server.ClientCAFile })},
	{name: "OTPGUARD_ENVOY_MAX_DESCRIPTORS", def: strconv.Itoa(envoy.DefaultMaxDescriptors), example: "16",
		doc:   "descriptors one `ShouldRateLimit` call may carry; a call with more is refused with `INVALID_ARGUMENT` before anything is counted (1..1000)",
		parse: whole(func(c *Config) *int { return &c.Envoy.MaxDescriptors }), check: checkEnvoyMaxDescriptors},
	{name: "OTPGUARD_ENVOY_MAX_ENTRIES", def: strconv.Itoa(envoy.DefaultMaxEntries), example: "8",
		doc:   "entries one descriptor of a `ShouldRateLimit` call may carry; more: `INVALID_ARGUMENT`, before anything is counted (1..1000)",
		parse: whole(func(c *Config) *int { return &c.Envoy.MaxEntries }), check: checkEnvoyMaxEntries},
	{name: "OTPGUARD_LOG_LEVEL", def: "info", example: "debug",
		doc:   "`debug`, `info`, `warn`, `error`",
		parse: text(func(c *Config) *string { return &c.LogLevel }), check: checkLogLevel},
	{name: "OTPGUARD_LOG_ALLOWED_CHECKS", def: strconv.Itoa(DefaultLogAllowedChecks), example: "1",
		doc:   "one allowed `/limits/check` answer in N gets its request line at `info` (the rest at `debug`); every refusal, error, send and verify is logged; `1` logs every one (1..1000000)",
		parse: whole(func(c *Config) *int { return &c.LogAllowedChecks }), check: checkLogAllowedChecks},
	{name: "OTPGUARD_REDIS_MODE", def: "single", example: "cluster",
		doc:   "`single` (one server, `OTPGUARD_REDIS_URL`), `cluster` (Redis Cluster) or `sentinel`",
		parse: text(func(c *Config) *string { return &c.Redis.Mode }), check: checkRedisMode},
	{name: "OTPGUARD_REDIS_URL", secret: true, defDoc: "unset: embedded miniredis", example: "redis://:pw@10.0.0.5:6379/0",
		doc:   "single mode: the shared Redis (>= 7); `rediss://` is TLS; not used with cluster or sentinel",
		parse: text(func(c *Config) *string { return &c.RedisURL }), check: checkRedisURL},
	{name: "OTPGUARD_REDIS_ADDRS", example: "10.0.0.1:6379,10.0.0.2:6379",
		doc:   "cluster: seed nodes (any subset); sentinel: the sentinels; comma-separated `host:port`",
		parse: list(func(c *Config) *[]string { return &c.Redis.Addrs })},
	{name: "OTPGUARD_REDIS_MASTER", example: "otpguard",
		doc:   "sentinel: the master name the sentinels monitor",
		parse: text(func(c *Config) *string { return &c.Redis.Master })},
	{name: "OTPGUARD_REDIS_USERNAME", example: "otpguard",
		doc:   "ACL user for every node (single: replaces the URL's)",
		parse: text(func(c *Config) *string { return &c.Redis.Username })},
	{name: "OTPGUARD_REDIS_PASSWORD", secret: true, example: "OTPGUARD_REDIS_PASSWORD_FILE=/run/secrets/redis",
		doc:   "password for every node (single: replaces the URL's); not for the sentinels themselves",
		parse: text(func(c *Config) *string { return &c.Redis.Password })},
	{name: "OTPGUARD_REDIS_TLS", def: "false", example: "true",
		doc:   "cluster, sentinel: TLS to every node (single mode takes `rediss://` instead)",
		parse: boolean(func(c *Config) *bool { return &c.Redis.TLS })},
	{name: "OTPGUARD_REDIS_PREFIX", def: "og:", example: "og:prod:",
		doc:   "prefix of every key; no `{` or `}` in cluster or sentinel mode",
		parse: text(func(c *Config) *string { return &c.RedisPrefix })},
	{name: "OTPGUARD_REDIS_TIMEOUT", defDoc: "`10ms` (`1s` embedded)", example: "25ms",
		doc:   "the timeout of one store call, dial included (1ms..10s), while the probe does not vouch for Redis",
		parse: parseRedisTimeout, check: checkRedisTimeout},
	{name: "OTPGUARD_REDIS_MAX_WAIT", defDoc: "`max(1s, OTPGUARD_REDIS_TIMEOUT)`", example: "500ms",
		doc:   "how long a decision waits for a Redis the probe vouches for before it is shed with `503 overloaded` (timeout..1m)",
		parse: duration(func(c *Config) *time.Duration { return &c.RedisMaxWait }), check: checkRedisMaxWait},
	{name: "OTPGUARD_MAX_IN_FLIGHT", def: strconv.Itoa(DefaultMaxInFlight), example: "64",
		doc:   "decisions (sends, verifies, checks, Envoy's `ShouldRateLimit` calls) one instance works on at once, HTTP and gRPC together; more are shed at once with `503 overloaded` (gRPC: `UNAVAILABLE`) (1..100000)",
		parse: whole(func(c *Config) *int { return &c.MaxInFlight }), check: checkMaxInFlight},
	{name: "OTPGUARD_REDIS_PIPELINES", def: strconv.Itoa(DefaultRedisPipelines), example: "0",
		doc:   "most pipelines of coalesced script calls on the wire at once: one at a time, another only beside one out for half of `OTPGUARD_REDIS_TIMEOUT`; `0` sends each command on its own (0..1024)",
		parse: whole(func(c *Config) *int { return &c.RedisPipelines }), check: checkRedisPipelines},
	{name: "OTPGUARD_LIMIT_SHARDS", def: strconv.Itoa(store.DefaultLimitShards), example: "16384",
		doc:   "hashes per `/limits/check` policy and time slice that hold the limits, many to a hash (docs/scaling.md, where the keys live); every instance on one Redis must use the same value, and changing it starts every limit again (1..1048576)",
		parse: whole(func(c *Config) *int { return &c.LimitShards }), check: checkLimitShards},
	{name: "OTPGUARD_INSTANCES", defDoc: "unset: counted by heartbeat", example: "6",
		doc:   "fixes N, which split limits divide by (1..10000)",
		parse: whole(func(c *Config) *int { return &c.Instances }), check: checkInstances},
	{name: "OTPGUARD_DATABASE_URL", secret: true, defDoc: "unset: SQLite file", example: "postgres://otpguard@db/otpguard?sslmode=require",
		doc:   "the SQL store (deny-list, audit trail); PostgreSQL",
		parse: text(func(c *Config) *string { return &c.DatabaseURL }), check: checkDatabaseURL},
	{name: "OTPGUARD_DATA_DIR", def: "./data", example: "/var/lib/otpguard",
		doc:   "where the SQLite file (`otpguard.db`) lives when there is no database URL",
		parse: text(func(c *Config) *string { return &c.DataDir }), check: checkDataDir},
	{name: "OTPGUARD_AUTO_MIGRATE", def: "true", example: "false",
		doc:   "apply pending migrations at start; `false` refuses to serve on an old schema",
		parse: boolean(func(c *Config) *bool { return &c.AutoMigrate })},
	{name: "OTPGUARD_AUDIT_RETENTION", def: "720h", defDoc: "(30 days)", example: "2160h",
		doc:   "how long audit events, and deny-list entries after they expire, are kept (at least `1h`)",
		parse: duration(func(c *Config) *time.Duration { return &c.AuditRetention }), check: checkAuditRetention},
	{name: "OTPGUARD_DENYLIST_REFRESH", def: "2s", example: "500ms",
		doc:   "how often each instance reloads the deny-list and the emergency overrides (100ms..1m)",
		parse: duration(func(c *Config) *time.Duration { return &c.DenyListRefresh }), check: checkDenyListRefresh},
	{name: "OTPGUARD_TRUSTED_PROXIES", defDoc: "none: no forwarding header is believed, the peer address is the client", example: "10.0.0.0/24,2001:db8:f::/48",
		doc:   "comma-separated CIDR prefixes (or single addresses) of the proxies in front of otpguard; only a request from one of them may name its client by `X-Forwarded-For` (the right-most hop that is not a listed proxy counts) or `X-Real-IP`. The client address is what the wrong-key limits count and the audit trail records; loopback and private networks are not trusted unless listed",
		parse: prefixes(func(c *Config) *[]netip.Prefix { return &c.TrustedProxies })},
	{name: "OTPGUARD_DATABASE_TIMEOUT", def: "3s", example: "1s",
		doc:   "the timeout of every SQL call, connecting included, and of all the SQL work of one ops request together (10ms..1m): an ops route answers within it, `503 database_unavailable` for what the database did not answer in time",
		parse: duration(func(c *Config) *time.Duration { return &c.DatabaseTimeout }), check: checkDatabaseTimeout},
	{name: "OTPGUARD_SMS", defDoc: "`console` in embedded mode; **required** with a shared Redis", example: "twilio",
		doc:   "SMS sender: `console` (prints each SMS as a JSON line on standard output) or `twilio`",
		parse: text(func(c *Config) *string { return &c.SMS }), check: checkSMS},
	{name: "TWILIO_ACCOUNT_SID", example: "AC0123...",
		doc:   "required with `OTPGUARD_SMS=twilio`",
		parse: text(func(c *Config) *string { return &c.Twilio.AccountSID })},
	{name: "TWILIO_AUTH_TOKEN", secret: true, example: "TWILIO_AUTH_TOKEN_FILE=/run/secrets/twilio",
		doc:   "required with `OTPGUARD_SMS=twilio`; also checks `/sms/status` signatures",
		parse: text(func(c *Config) *string { return &c.Twilio.AuthToken })},
	{name: "TWILIO_FROM", example: "+14155550100",
		doc:   "sender number; set exactly one of this and the next",
		parse: text(func(c *Config) *string { return &c.Twilio.From })},
	{name: "TWILIO_MESSAGING_SERVICE_SID", example: "MG0123...",
		doc:   "a Twilio messaging service instead of a number",
		parse: text(func(c *Config) *string { return &c.Twilio.MessagingServiceSID })},
	{name: "TWILIO_WHATSAPP_FROM", example: "+14155550111",
		doc:   "the WhatsApp sender's number: with `TWILIO_WHATSAPP_CONTENT_SID`, turns the `whatsapp` channel on",
		parse: text(func(c *Config) *string { return &c.Twilio.WhatsAppFrom })},
	{name: "TWILIO_WHATSAPP_CONTENT_SID", example: "HX0123...",
		doc:   "an approved WhatsApp authentication template; its variable `{{1}}` is the code",
		parse: text(func(c *Config) *string { return &c.Twilio.WhatsAppContentSID })},
	{name: "TWILIO_VOICE_FROM", example: "+14155550122",
		doc:   "the caller number of voice codes: turns the `call` channel on",
		parse: text(func(c *Config) *string { return &c.Twilio.VoiceFrom })},
	{name: "TWILIO_API_BASE_URL", defDoc: "real Twilio", example: "http://127.0.0.1:4010",
		doc:   "a Twilio-compatible API (a staging mock); paths stay Twilio's",
		parse: text(func(c *Config) *string { return &c.Twilio.BaseURL })},
	{name: "TWILIO_STATUS_CALLBACK_URL", defDoc: "none", example: "https://otpguard.example/sms/status",
		doc:   "delivery status callback set on each message, and the URL `POST /sms/status` checks Twilio's signature against",
		parse: text(func(c *Config) *string { return &c.Twilio.StatusCallback })},
	// otp.challenge: type captcha (captcha.go).
	{name: "OTPGUARD_CAPTCHA_VERIFY_URL", defDoc: "none", example: "https://challenges.cloudflare.com/turnstile/v0/siteverify",
		doc:   "the CAPTCHA provider's `siteverify` (Turnstile, hCaptcha, reCAPTCHA); required with `otp.challenge.type: captcha`",
		parse: text(func(c *Config) *string { return &c.Captcha.VerifyURL })},
	{name: "OTPGUARD_CAPTCHA_SECRET", secret: true, example: "OTPGUARD_CAPTCHA_SECRET_FILE=/run/secrets/captcha",
		doc:   "the provider's secret key, sent to `siteverify`; required with `otp.challenge.type: captcha`",
		parse: text(func(c *Config) *string { return &c.Captcha.Secret })},
	{name: "OTPGUARD_CAPTCHA_SITE_KEY", example: "0x4AAAAAAA...",
		doc:   "the provider's site key, returned in the challenge for the client to render the widget",
		parse: text(func(c *Config) *string { return &c.Captcha.SiteKey })},
	{name: "OTPGUARD_CAPTCHA_HOSTNAMES", defDoc: "none; **required** with `otp.challenge.type: captcha`", example: "example.com,www.example.com",
		doc:   "the sites a token may be solved on, comma-separated: the provider's answer must name one of them as its `hostname` (case aside), else the token is refused",
		parse: list(func(c *Config) *[]string { return &c.Captcha.Hostnames })},
	{name: "OTPGUARD_CAPTCHA_ACTION", defDoc: "unset: not checked", example: "otp_send",
		doc:   "the action the provider's answer must name as its `action` (reCAPTCHA v3's `action`, Turnstile's `data-action`), else the token is refused",
		parse: text(func(c *Config) *string { return &c.Captcha.Action })},
	{name: "OTPGUARD_CAPTCHA_MIN_SCORE", defDoc: "unset: an answer with a score is a provider failure; **required** with reCAPTCHA, refused with hCaptcha (its scores run the other way)", example: "0.5",
		doc:   "the least `score` an answer may carry (0..1, read as reCAPTCHA v3's: 1.0 very likely a human); a lower score refuses the token, an answer without one is judged without it",
		parse: decimal(func(c *Config) *float64 { return &c.Captcha.MinScore }), check: checkCaptchaMinScore},
	{name: "OTPGUARD_CAPTCHA_TIMEOUT", def: challenge.DefaultCaptchaTimeout.String(), example: "1s",
		doc:   "the timeout of one `siteverify` call (100ms..10s); a provider that does not answer in it is `503 challenge_unavailable`",
		parse: duration(func(c *Config) *time.Duration { return &c.Captcha.Timeout }), check: checkCaptchaTimeout},
	{name: "OTPGUARD_CAPTCHA_MAX_IN_FLIGHT", defDoc: "`16`, at most a quarter of `OTPGUARD_MAX_IN_FLIGHT`", example: "8",
		doc:   "`siteverify` calls one instance has under way at once; a send past it is `503 challenge_unavailable` at once, so a slow provider holds no more of the in-flight slots (1..half of `OTPGUARD_MAX_IN_FLIGHT`)",
		parse: whole(func(c *Config) *int { return &c.Captcha.MaxInFlight }), check: checkCaptchaMaxInFlight},
	// otp.risk: the Twilio Lookup client (risk.go).
	{name: "OTPGUARD_RISK_LOOKUP_TIMEOUT", def: sms.DefaultLookupTimeout.String(), example: "2s",
		doc:   "the Lookup client's own bound on one risk lookup (100ms..10s); `otp.risk.timeout` (default `1500ms`) bounds it per policy, the shorter wins; a lookup that does not answer in time is no answer (the send gets the challenge)",
		parse: duration(func(c *Config) *time.Duration { return &c.Risk.Timeout }), check: checkRiskTimeout},
	{name: "OTPGUARD_RISK_LOOKUP_MAX_IN_FLIGHT", defDoc: "`8`, at most a quarter of `OTPGUARD_MAX_IN_FLIGHT`", example: "4",
		doc:   "risk lookups one instance has under way at once; one past it is no answer at once (never queued), so a slow Lookup holds no more of the in-flight slots (1..half of `OTPGUARD_MAX_IN_FLIGHT`)",
		parse: whole(func(c *Config) *int { return &c.Risk.MaxInFlight }), check: checkRiskMaxInFlight},
	{name: "OTPGUARD_RISK_LOOKUP_PRICE", def: strconv.FormatFloat(DefaultRiskLookupPrice, 'f', -1, 64), example: "0.025",
		doc:   "what one risk lookup costs, in US dollars, for `otpguard_risk_lookup_cost_usd_total` (an estimate by default: set your contract's price) (0..10)",
		parse: decimal(func(c *Config) *float64 { return &c.Risk.Price }), check: checkRiskPrice},
	// Tracing: the standard OTEL_* variables, read as given; what they
	// mean together is otelEnv.tracing's (tracing.go).
	{name: "OTEL_EXPORTER_OTLP_ENDPOINT", defDoc: "unset: tracing off", example: "http://otel-collector:4318",
		doc:   "OTLP endpoint of a collector; setting it (or the next) turns tracing on",
		parse: text(func(c *Config) *string { return &c.otel.endpoint })},
	{name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", example: "http://otel-collector:4318/v1/traces",
		doc:   "the traces endpoint alone (full URL over HTTP); wins over the previous",
		parse: text(func(c *Config) *string { return &c.otel.tracesEndpoint })},
	{name: "OTEL_TRACES_EXPORTER", defDoc: "`otlp` when an endpoint is set", example: "none",
		doc:   "`otlp` turns tracing on (to the exporter's default `localhost` endpoint without one); `none` keeps it off",
		parse: text(func(c *Config) *string { return &c.otel.exporter })},
	{name: "OTEL_EXPORTER_OTLP_PROTOCOL", def: OTLPHTTP, example: "grpc",
		doc:   "`http/protobuf` or `grpc`",
		parse: text(func(c *Config) *string { return &c.otel.protocol })},
	{name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", defDoc: "unset: as `OTEL_EXPORTER_OTLP_PROTOCOL`", example: "grpc",
		doc:   "the traces' protocol alone; wins over the previous",
		parse: text(func(c *Config) *string { return &c.otel.tracesProtocol })},
	{name: "OTEL_SERVICE_NAME", def: "otpguard", example: "otpguard-eu",
		doc: "the traces' `service.name` (`OTEL_RESOURCE_ATTRIBUTES` adds more); read by the SDK"},
	{name: "OTEL_TRACES_SAMPLER", def: "parentbased_always_on", example: "parentbased_traceidratio",
		doc:   "which traces are recorded; a caller's sampled flag is followed by the `parentbased_` ones only from a peer in `OTPGUARD_TRUSTED_PROXIES` (anyone else's trace is joined, sampled as for a new trace)",
		parse: text(func(c *Config) *string { return &c.otel.sampler })},
	{name: "OTEL_TRACES_SAMPLER_ARG", example: "0.1",
		doc:   "the ratio (0..1) of the `traceidratio` samplers",
		parse: text(func(c *Config) *string { return &c.otel.samplerArg })},
	{name: "OTEL_SDK_DISABLED", def: "false", example: "true",
		doc:   "turns tracing off whatever else is set",
		parse: text(func(c *Config) *string { return &c.otel.sdkDisabled })},
}

// toolSettings are OTPGUARD_ variables read by the tests, CI and the load
// command, not by the service: not reported as unknown.
var toolSettings = []string{
	"OTPGUARD_API_KEY", // otpguard-load
	"OTPGUARD_REQUIRE_SERVICES", "OTPGUARD_ARTIFACTS",
}
