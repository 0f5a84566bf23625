package redistest

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
)

// go-redis prints through one process-wide logger, to stderr: every failed
// dial of every outage test (and of the pool topping itself up while Redis
// is down) would bury a test run's result in noise. Tests that import this
// package start quiet; OTPGUARD_TEST_REDIS_LOG=1 keeps go-redis's lines
// when hunting a problem. (otpguard itself routes them into its log:
// internal/app.)
func init() {
	if os.Getenv("OTPGUARD_TEST_REDIS_LOG") != "1" {
		redis.SetLogger(quiet{})
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
