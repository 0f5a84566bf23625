package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// parseSettings reads every setting through getenv into c, each from its
// value, its _FILE (secrets) or its default, and returns every mistake.
func parseSettings(c *Config, getenv func(string) string) error {
	var errs []error
	for _, s := range settings {
		if s.parse == nil { // read by the OpenTelemetry SDK
			continue
		}
		v, err := s.value(getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.parse(c, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// value is what the environment says of s: the variable, or for a secret
// the file its _FILE names (not both), or s.def when unset.
func (s setting) value(getenv func(string) string) (string, error) {
	v := getenv(s.name)
	if s.secret {
		switch file := getenv(s.name + "_FILE"); {
		case v != "" && file != "":
			return "", fmt.Errorf("%s and %s_FILE: set one, not both", s.name, s.name)
		case file != "":
			b, err := os.ReadFile(file)
			if err != nil {
				return "", fmt.Errorf("%s_FILE: %w", s.name, err)
			}
			v = strings.TrimRight(string(b), "\r\n")
		}
	}
	return or(v, s.def), nil
}

// The parsers: each puts a value into the Config field field returns. An
// error does not name the variable: parseSettings prefixes it.

func text(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

// list reads a comma-separated list; blanks around items are dropped.
func list(field func(*Config) *[]string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = splitList(v); return nil }
}

func whole(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		*field(c) = n
		return nil
	}
}

// decimal reads a number such as 0.5.
func decimal(field func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number (e.g. 0.5)", v)
		}
		*field(c) = f
		return nil
	}
}

func duration(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 10ms, 1s)", v)
		}
		*field(c) = d
		return nil
	}
}

func boolean(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(c) = b
		return nil
	}
}

// prefixes reads a comma-separated list of CIDR prefixes; a bare address
// is a prefix of one address.
func prefixes(field func(*Config) *[]netip.Prefix) func(*Config, string) error {
	return func(c *Config, v string) error {
		var out []netip.Prefix
		for _, item := range splitList(v) {
			p, err := netip.ParsePrefix(item)
			if err != nil {
				a, aerr := netip.ParseAddr(item)
				if aerr != nil || a.Zone() != "" {
					return fmt.Errorf("%q is not a CIDR prefix (e.g. 10.0.0.0/8, 2001:db8::/32) or an address", item)
				}
				p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			}
			out = append(out, p.Masked())
		}
		*field(c) = out
		return nil
	}
}

// parseRedisTimeout reads OTPGUARD_REDIS_TIMEOUT, whose default depends on
// the Redis (listed before it). The embedded Redis lives in this process:
// it cannot be partitioned away, and a slow call there means a starved
// CPU, not an outage.
func parseRedisTimeout(c *Config, v string) error {
	c.RedisTimeout = 10 * time.Millisecond
	if c.Embedded() {
		c.RedisTimeout = time.Second
	}
	return duration(func(c *Config) *time.Duration { return &c.RedisTimeout })(c, v)
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
