package config

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
)

// redisCheckTimeout bounds config check's questions to a Redis Cluster,
// as start-up bounds its own.
const redisCheckTimeout = 5 * time.Second

// CheckCommand runs `otpguard config check` (args: what follows "config"):
// it reads the configuration as serve does (environ adds the warning about
// OTPGUARD_ variables otpguard does not know), validates it, asks a Redis
// Cluster what its settings deserve a word on, and writes what Describe
// says to stdout.
func CheckCommand(ctx context.Context, args []string, getenv func(string) string, environ []string, stdout io.Writer) error {
	if len(args) < 1 || args[0] != "check" {
		return fmt.Errorf("usage: otpguard config check")
	}
	cfg, err := LoadWithWarnings(getenv, environ)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Warnings = append(cfg.Warnings, redisWarnings(ctx, cfg)...)
	return cfg.Describe(stdout)
}

// LoadWithWarnings is Load, with a warning in Warnings for each OTPGUARD_
// variable of environ (os.Environ's form) that otpguard does not know
// (UnknownSettings): what serve logs and config check prints.
func LoadWithWarnings(getenv func(string) string, environ []string) (*Config, error) {
	cfg, err := Load(getenv)
	if err != nil {
		return nil, err
	}
	cfg.Warnings = append(cfg.Warnings, UnknownSettings(environ)...)
	return cfg, nil
}

// ClusterWarnings are what Redis Cluster's settings deserve a word on (at
// start-up, and by `otpguard config check`): masters that require full
// coverage (store.ClusterCoverage). None off a cluster.
func ClusterWarnings(ctx context.Context, rdb redis.UniversalClient) []string {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	cov, err := store.ClusterCoverage(ctx, cc)
	if err != nil {
		return []string{fmt.Sprintf("could not read cluster-require-full-coverage from the redis cluster (%v): make sure it is no on every node", err)}
	}
	return cov.Warnings()
}

// redisWarnings connects to the configured Redis Cluster for `otpguard
// config check` and returns what its settings deserve a word on
// (ClusterWarnings); nothing in the other modes, which it does not
// connect to.
func redisWarnings(ctx context.Context, cfg *Config) []string {
	if cfg.Embedded() || cfg.Redis.Mode != store.RedisCluster {
		return nil
	}
	rdb, err := store.NewUniversalClient(cfg.RedisOptions())
	if err != nil {
		return []string{fmt.Sprintf("redis cluster: %v", err)}
	}
	defer rdb.Close()
	sctx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	defer cancel()
	return ClusterWarnings(sctx, rdb)
}
