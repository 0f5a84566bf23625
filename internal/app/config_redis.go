package app

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/otpguard/otpguard/internal/store"
)

// RedisConfig says how to reach Redis beyond one URL (docs/scaling.md):
//
//	OTPGUARD_REDIS_MODE      single (default) | cluster | sentinel
//	OTPGUARD_REDIS_ADDRS     cluster: seed nodes; sentinel: the sentinels (host:port, comma-separated)
//	OTPGUARD_REDIS_MASTER    sentinel: the master's name
//	OTPGUARD_REDIS_USERNAME  ACL user (single: replaces the URL's)
//	OTPGUARD_REDIS_PASSWORD  (or _FILE) password (single: replaces the URL's)
//	OTPGUARD_REDIS_TLS       cluster, sentinel: TLS to every node (single: use rediss://)
type RedisConfig struct {
	Mode     string
	Addrs    []string
	Master   string
	Username string
	Password string
	TLS      bool
}

func loadRedisConfig(getenv func(string) string) (RedisConfig, error) {
	r := RedisConfig{
		Mode:     or(getenv("OTPGUARD_REDIS_MODE"), store.RedisSingle),
		Addrs:    splitList(getenv("OTPGUARD_REDIS_ADDRS")),
		Master:   getenv("OTPGUARD_REDIS_MASTER"),
		Username: getenv("OTPGUARD_REDIS_USERNAME"),
	}
	var errs []error
	var err error
	if r.Password, err = secret(getenv, "OTPGUARD_REDIS_PASSWORD"); err != nil {
		errs = append(errs, err)
	}
	if r.TLS, err = boolEnv(getenv, "OTPGUARD_REDIS_TLS", false); err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// validateRedis checks that the connection settings fit the mode.
func (c *Config) validateRedis() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	r := c.Redis
	switch r.Mode {
	case store.RedisSingle:
		if len(r.Addrs) > 0 {
			bad("OTPGUARD_REDIS_ADDRS: only for OTPGUARD_REDIS_MODE=cluster or sentinel; a single server is OTPGUARD_REDIS_URL")
		}
		if r.Master != "" {
			bad("OTPGUARD_REDIS_MASTER: only for OTPGUARD_REDIS_MODE=sentinel")
		}
		if r.TLS {
			bad("OTPGUARD_REDIS_TLS: only for cluster or sentinel; a single server takes a rediss:// OTPGUARD_REDIS_URL")
		}
		if c.RedisURL == "" && (r.Username != "" || r.Password != "") {
			bad("OTPGUARD_REDIS_USERNAME/OTPGUARD_REDIS_PASSWORD: set OTPGUARD_REDIS_URL too (the embedded Redis takes no credentials)")
		}
		return errs
	case store.RedisCluster, store.RedisSentinel:
	default:
		bad("OTPGUARD_REDIS_MODE: must be single, cluster or sentinel, got %q", r.Mode)
		return errs
	}
	if c.RedisURL != "" {
		bad("OTPGUARD_REDIS_URL: not used with OTPGUARD_REDIS_MODE=%s; list the nodes in OTPGUARD_REDIS_ADDRS", r.Mode)
	}
	if len(r.Addrs) == 0 {
		bad("OTPGUARD_REDIS_ADDRS: required with OTPGUARD_REDIS_MODE=%s (comma-separated host:port)", r.Mode)
	}
	for _, a := range r.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			bad("OTPGUARD_REDIS_ADDRS: %q is not host:port", a)
		}
	}
	if r.Mode == store.RedisSentinel && r.Master == "" {
		bad("OTPGUARD_REDIS_MASTER: required with OTPGUARD_REDIS_MODE=sentinel (the name the sentinels monitor)")
	}
	if r.Mode == store.RedisCluster && r.Master != "" {
		bad("OTPGUARD_REDIS_MASTER: only for OTPGUARD_REDIS_MODE=sentinel")
	}
	if strings.ContainsAny(c.RedisPrefix, "{}") {
		bad("OTPGUARD_REDIS_PREFIX: must not contain { or }: the keys' hash tags place them in Cluster slots")
	}
	return errs
}

// redisOptions is how store.NewUniversalClient is to connect (not the
// embedded Redis).
func (c *Config) redisOptions() store.RedisOptions {
	return store.RedisOptions{
		URL: c.RedisURL, Timeout: c.RedisTimeout, MaxWait: c.maxWait(),
		Mode: c.Redis.Mode, Addrs: c.Redis.Addrs, Master: c.Redis.Master,
		Username: c.Redis.Username, Password: c.Redis.Password, TLS: c.Redis.TLS,
	}
}

// redisTarget names the Redis for logs, without secrets.
func (c *Config) redisTarget() string {
	switch c.Redis.Mode {
	case store.RedisCluster:
		return "cluster " + strings.Join(c.Redis.Addrs, ",")
	case store.RedisSentinel:
		return "sentinel master " + c.Redis.Master + " via " + strings.Join(c.Redis.Addrs, ",")
	}
	return redactURL(c.RedisURL)
}
