package config

import (
	"net"
	"strings"

	"github.com/otpguard/otpguard/internal/store"
)

// RedisConfig says how to reach a Redis Cluster or Sentinel beyond one
// URL (docs/scaling.md; the OTPGUARD_REDIS_* settings in settings.go).
type RedisConfig struct {
	Mode     string // single (default), cluster or sentinel
	Addrs    []string
	Master   string
	Username string
	Password string
	TLS      bool
}

// checkSingleRedis: one server is reached by its URL alone.
func (c *Config) checkSingleRedis() error {
	r := c.Redis
	if r.Mode != store.RedisSingle {
		return nil
	}
	var cs complaints
	if len(r.Addrs) > 0 {
		cs.add("OTPGUARD_REDIS_ADDRS: only for OTPGUARD_REDIS_MODE=cluster or sentinel; a single server is OTPGUARD_REDIS_URL")
	}
	if r.Master != "" {
		cs.add("OTPGUARD_REDIS_MASTER: only for OTPGUARD_REDIS_MODE=sentinel")
	}
	if r.TLS {
		cs.add("OTPGUARD_REDIS_TLS: only for cluster or sentinel; a single server takes a rediss:// OTPGUARD_REDIS_URL")
	}
	if c.RedisURL == "" && (r.Username != "" || r.Password != "") {
		cs.add("OTPGUARD_REDIS_USERNAME/OTPGUARD_REDIS_PASSWORD: set OTPGUARD_REDIS_URL too (the embedded Redis takes no credentials)")
	}
	return cs.err()
}

// checkRedisNodes: a Cluster or Sentinel is reached by its nodes, and the
// keys' hash tags must survive the prefix.
func (c *Config) checkRedisNodes() error {
	r := c.Redis
	if r.Mode != store.RedisCluster && r.Mode != store.RedisSentinel {
		return nil
	}
	var cs complaints
	if c.RedisURL != "" {
		cs.add("OTPGUARD_REDIS_URL: not used with OTPGUARD_REDIS_MODE=%s; list the nodes in OTPGUARD_REDIS_ADDRS", r.Mode)
	}
	if len(r.Addrs) == 0 {
		cs.add("OTPGUARD_REDIS_ADDRS: required with OTPGUARD_REDIS_MODE=%s (comma-separated host:port)", r.Mode)
	}
	for _, a := range r.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			cs.add("OTPGUARD_REDIS_ADDRS: %q is not host:port", a)
		}
	}
	if r.Mode == store.RedisSentinel && r.Master == "" {
		cs.add("OTPGUARD_REDIS_MASTER: required with OTPGUARD_REDIS_MODE=sentinel (the name the sentinels monitor)")
	}
	if r.Mode == store.RedisCluster && r.Master != "" {
		cs.add("OTPGUARD_REDIS_MASTER: only for OTPGUARD_REDIS_MODE=sentinel")
	}
	if strings.ContainsAny(c.RedisPrefix, "{}") {
		cs.add("OTPGUARD_REDIS_PREFIX: must not contain { or }: the keys' hash tags place them in Cluster slots")
	}
	return cs.err()
}

// RedisOptions is how store.NewUniversalClient is to connect (not the
// embedded Redis).
func (c *Config) RedisOptions() store.RedisOptions {
	return store.RedisOptions{
		URL: c.RedisURL, Timeout: c.RedisTimeout, MaxWait: c.MaxWait(),
		Mode: c.Redis.Mode, Addrs: c.Redis.Addrs, Master: c.Redis.Master,
		Username: c.Redis.Username, Password: c.Redis.Password, TLS: c.Redis.TLS,
	}
}

// RedisTarget names the Redis for logs, without secrets.
func (c *Config) RedisTarget() string {
	switch c.Redis.Mode {
	case store.RedisCluster:
		return "cluster " + strings.Join(c.Redis.Addrs, ",")
	case store.RedisSentinel:
		return "sentinel master " + c.Redis.Master + " via " + strings.Join(c.Redis.Addrs, ",")
	}
	return redactURL(c.RedisURL)
}
