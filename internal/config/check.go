package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/sqlstore"
	"github.com/otpguard/otpguard/internal/store"
)

// The checks of one setting each (settings.go lists which is whose): what
// Validate says of a value on its own. The error does not name the
// variable: Validate prefixes it.

func checkListenAddr(c *Config) error { return checkAddr(c.Addr) }

func checkDebugListenAddr(c *Config) error {
	if c.DebugAddr == "" {
		return nil
	}
	return checkDebugAddr(c.DebugAddr)
}

func checkHMACKeyLength(c *Config) error {
	if n := len(c.HMACKey); n > 0 && n < 32 {
		return fmt.Errorf("must be at least 32 bytes, got %d", n)
	}
	return nil
}

func checkLogLevel(c *Config) error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("must be debug, info, warn or error, got %q", c.LogLevel)
}

func checkRedisMode(c *Config) error {
	switch c.Redis.Mode {
	case store.RedisSingle, store.RedisCluster, store.RedisSentinel:
		return nil
	}
	return fmt.Errorf("must be single, cluster or sentinel, got %q", c.Redis.Mode)
}

func checkRedisURL(c *Config) error {
	if c.RedisURL == "" {
		return nil
	}
	if _, err := redis.ParseURL(c.RedisURL); err != nil {
		// The URL may hold a password: only the parser's reason is shown.
		return fmt.Errorf("not a redis:// or rediss:// URL (%s)", urlProblem(err))
	}
	return nil
}

func checkRedisTimeout(c *Config) error {
	if c.RedisTimeout < time.Millisecond || c.RedisTimeout > 10*time.Second {
		return fmt.Errorf("must be between 1ms and 10s, got %s", c.RedisTimeout)
	}
	return nil
}

func checkRedisMaxWait(c *Config) error {
	if c.RedisMaxWait != 0 && (c.RedisMaxWait < c.RedisTimeout || c.RedisMaxWait > time.Minute) {
		return fmt.Errorf("must be between OTPGUARD_REDIS_TIMEOUT (%s) and 1m, got %s", c.RedisTimeout, c.RedisMaxWait)
	}
	return nil
}

func checkRedisPipelines(c *Config) error {
	if c.RedisPipelines < 0 || c.RedisPipelines > 1024 {
		return fmt.Errorf("must be between 0 (no coalescing) and 1024, got %d", c.RedisPipelines)
	}
	return nil
}

func checkLimitShards(c *Config) error {
	if c.LimitShards < 1 || c.LimitShards > 1<<20 {
		return fmt.Errorf("must be between 1 and 1048576, got %d", c.LimitShards)
	}
	return nil
}

func checkMaxInFlight(c *Config) error {
	if c.MaxInFlight < 1 || c.MaxInFlight > 100_000 {
		return fmt.Errorf("must be between 1 and 100000, got %d", c.MaxInFlight)
	}
	return nil
}

func checkLogAllowedChecks(c *Config) error {
	if c.LogAllowedChecks < 1 || c.LogAllowedChecks > 1_000_000 {
		return fmt.Errorf("must be between 1 and 1000000, got %d", c.LogAllowedChecks)
	}
	return nil
}

func checkInstances(c *Config) error {
	if c.Instances < 0 || c.Instances > 10_000 {
		return fmt.Errorf("must be between 1 and 10000 (or unset: counted by heartbeat), got %d", c.Instances)
	}
	return nil
}

func checkDatabaseURL(c *Config) error { return sqlstore.CheckDatabaseURL(c.DatabaseURL) }

// checkDataDir: the SQLite file's directory, when there is no database URL.
func checkDataDir(c *Config) error {
	if c.DatabaseURL != "" {
		return nil
	}
	if fi, err := os.Stat(c.DataDir); err == nil && !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a directory", c.DataDir)
	}
	return nil
}

func checkAuditRetention(c *Config) error {
	if c.AuditRetention < time.Hour {
		return fmt.Errorf("must be at least 1h, got %s", c.AuditRetention)
	}
	return nil
}

func checkDenyListRefresh(c *Config) error {
	if c.DenyListRefresh < 100*time.Millisecond || c.DenyListRefresh > time.Minute {
		return fmt.Errorf("must be between 100ms and 1m, got %s", c.DenyListRefresh)
	}
	return nil
}

func checkDatabaseTimeout(c *Config) error {
	if c.DatabaseTimeout < 10*time.Millisecond || c.DatabaseTimeout > time.Minute {
		return fmt.Errorf("must be between 10ms and 1m, got %s", c.DatabaseTimeout)
	}
	return nil
}

// checkSMS: the sender's name; unset is checkSenderChosen's.
func checkSMS(c *Config) error {
	switch c.SMS {
	case "", "console", "twilio":
		return nil
	}
	return fmt.Errorf("must be console or twilio, got %q", c.SMS)
}

// checkAddr checks a listen address: host:port, the port a number from 0
// (any free port) to 65535, the host empty (every interface), an IP
// address or a name.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8080 or :8080)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host name or address", addr, host)
	}
	return nil
}

// checkDebugAddr checks OTPGUARD_DEBUG_ADDR: a listen address on loopback.
// The profiles have no authentication and show the program's inner
// workings, so they are never offered to the network; an operator reaches
// them through ssh or a port-forward.
func checkDebugAddr(addr string) error {
	if err := checkAddr(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip, err := netip.ParseAddr(host); host == "localhost" || (err == nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%q: the profiles have no authentication: listen on loopback (e.g. 127.0.0.1:6060) and reach it through ssh or a port-forward", addr)
}

// urlProblem is why a URL did not parse, without the URL (it may hold a
// password).
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 { // a message quoting the URL
		return "malformed URL"
	}
	return msg
}

// checkHTTPServer accepts only Go's net/http, the one server of every
// route; a deployment that still asks for fasthttp is told what replaced it
// rather than silently served by something else.
func checkHTTPServer(c *Config) error {
	switch c.HTTPServer {
	case "", "net/http":
		return nil
	case "fasthttp":
		return errors.New("fasthttp is no longer offered: every route is served by Go's net/http; unset OTPGUARD_HTTP_SERVER")
	}
	return fmt.Errorf("must be net/http (the only server), got %q", c.HTTPServer)
}
