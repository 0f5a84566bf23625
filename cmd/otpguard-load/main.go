// Command otpguard-load drives POST /limits/check on a running otpguard
// and prints what it measured: requests per second, the share answered
// with a decision, status codes, p50/p99/p999 latency and its own CPU. At
// -rate it is an open loop (engine.go): request i is due at i/rate and its
// latency counts from then, over kept-alive connections it speaks HTTP/1.1
// on itself (wire.go), so that it leaves the cores to otpguard. With
// -redis-benchmark it then runs redis-benchmark on the same token bucket
// script (EVALSHA, 50 clients, same duration) against the same Redis and
// prints the ratio of otpguard's rate to the bare Redis round trip.
//
//	otpguard-load -key $OTPGUARD_API_KEY                 5,400 requests/s for 10s
//	otpguard-load -rate 0 -workers 64                   as fast as 64 workers go
//	otpguard-load -rate 0 -redis-benchmark 127.0.0.1:6379
//
// It stops by itself after -duration (or on Ctrl-C), and only targets
// loopback addresses unless -allow-remote is given. docs/benchmarks.md
// has the figures it produced, with their commands.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otpguard-load:", err)
		os.Exit(1)
	}
}

// Config is what one run does.
type Config struct {
	URL         string // otpguard's base URL
	APIKey      string
	Rate        int // requests per second; 0: as fast as Workers go
	Workers     int
	Connections int // kept-alive connections at a fixed rate; 0: sized for the rate
	Duration    time.Duration
	Timeout     time.Duration
	Policy      string
	Keys        int // distinct caller keys, used round-robin
	Batch       int // checks per request
	Cost        int64
	KeyPrefix   string
	AllowRemote bool

	// RedisBenchmark is the Redis (URL or host:port) to run redis-benchmark
	// against afterwards; "" skips it.
	RedisBenchmark string
	RedisClients   int
	RedisPrefix    string
	// Capacity and Refill are the bucket redis-benchmark's EVALSHA uses:
	// those of -policy (the built-in "default" policy by default).
	Capacity int64
	Refill   float64
	// OnlyRedisBenchmark runs redis-benchmark alone (no attack): for a
	// ratio against another load generator (docs/bench/saturation-wrk.sh).
	OnlyRedisBenchmark bool

	// SendShare is the share of requests that are POST /otp/send (mixed
	// load, send.go), each to a new number PhonePrefix+counter from a new
	// /64 IPPrefix+counter::1.
	SendShare float64
	// CPUProfile is where to write this command's own CPU profile: what
	// the load generator costs the cores it shares with otpguard.
	CPUProfile  string
	PhonePrefix string
	IPPrefix    string
}

// Bounds that keep a typo from turning a benchmark into an outage.
const (
	maxDuration = 10 * time.Minute
	maxRate     = 1_000_000
	maxWorkers  = 10_000
	maxKeys     = 10_000_000
)

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	def := guard.DefaultPolicies().Limits["default"]
	c := &Config{}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "otpguard's base URL")
	fs.StringVar(&c.APIKey, "key", "", "API key (default: $OTPGUARD_API_KEY)")
	fs.IntVar(&c.Rate, "rate", 5400, "requests per second; 0 = as fast as -workers can go (max-rate mode)")
	fs.IntVar(&c.Workers, "workers", 50, "connections, each sending as soon as it is answered, in max-rate mode (-rate 0)")
	fs.IntVar(&c.Connections, "connections", 0, "kept-alive connections at a fixed -rate, as an app server's pool would hold; a request due when all are busy waits, and its latency counts from when it was due (0 = one per 100 requests/s, 4..256)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to attack (at most 10m)")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "timeout of one request")
	fs.StringVar(&c.Policy, "policy", "default", "limit policy to check")
	fs.IntVar(&c.Keys, "keys", 1000, "number of distinct keys, used round-robin")
	fs.IntVar(&c.Batch, "batch", 1, fmt.Sprintf("checks per request (1..%d); a batch uses that many keys", limit.MaxBatch))
	fs.Int64Var(&c.Cost, "cost", 1, "cost of each check")
	fs.StringVar(&c.KeyPrefix, "key-prefix", "", "prefix of the checked keys (default: load-<random>: so runs do not share buckets)")
	fs.BoolVar(&c.AllowRemote, "allow-remote", false, "allow targets other than localhost/127.0.0.1/::1")
	fs.StringVar(&c.RedisBenchmark, "redis-benchmark", "", "also run redis-benchmark for the token bucket script against this Redis (redis://host:port/db or host:port)")
	fs.IntVar(&c.RedisClients, "redis-clients", 50, "redis-benchmark clients (-c)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "", "key prefix of redis-benchmark's buckets (default: otpguard-load:<random>:)")
	fs.Int64Var(&c.Capacity, "bucket-capacity", def.Capacity, "capacity of redis-benchmark's bucket (match -policy)")
	fs.Float64Var(&c.Refill, "bucket-refill", def.RefillPerSecond, "refill per second of redis-benchmark's bucket (match -policy)")
	fs.BoolVar(&c.OnlyRedisBenchmark, "only-redis-benchmark", false, "run only redis-benchmark (needs -redis-benchmark), no attack")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write this command's own CPU profile (of the attack) to this file")
	fs.Float64Var(&c.SendShare, "send-share", 0, "share of requests (0..1) that are POST /otp/send to new numbers, the rest /limits/check (mixed load)")
	fs.StringVar(&c.PhonePrefix, "phone-prefix", "", "sends go to this prefix + a 6-digit counter (default +9198 and 2 random digits)")
	fs.StringVar(&c.IPPrefix, "ip-prefix", "", "sends come from client_ip <prefix><counter>::1, a /64 each (default 2001:db8:<random>:)")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.APIKey == "" { // not the flag's default: -h would print the key
		c.APIKey = getenv("OTPGUARD_API_KEY")
	}
	run := randomHex(3)
	if c.KeyPrefix == "" {
		c.KeyPrefix = "load-" + run + ":"
	}
	if c.RedisPrefix == "" {
		c.RedisPrefix = "otpguard-load:" + run + ":"
	}
	if c.PhonePrefix == "" {
		c.PhonePrefix = fmt.Sprintf("+9198%02d", randomInt(100))
	}
	if c.IPPrefix == "" {
		c.IPPrefix = "2001:db8:" + randomHex(2) + ":"
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c, c.Validate()
}

// Validate checks the configuration, naming the flag at fault.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := checkTarget("-url", c.URL, c.AllowRemote); err != nil {
		errs = append(errs, err)
	}
	if c.APIKey == "" {
		bad("-key: an API key is required (or set OTPGUARD_API_KEY)")
	}
	if c.Rate < 0 || c.Rate > maxRate {
		bad("-rate: must be between 0 (max rate) and %d, got %d", maxRate, c.Rate)
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		bad("-workers: must be between 1 and %d, got %d", maxWorkers, c.Workers)
	}
	if c.Connections < 0 || c.Connections > maxWorkers {
		bad("-connections: must be between 0 (sized for the rate) and %d, got %d", maxWorkers, c.Connections)
	}
	if c.Duration <= 0 || c.Duration > maxDuration {
		bad("-duration: must be above 0 and at most %s, got %s", maxDuration, c.Duration)
	}
	if c.Timeout <= 0 {
		bad("-timeout: must be above 0, got %s", c.Timeout)
	}
	if c.Keys < 1 || c.Keys > maxKeys {
		bad("-keys: must be between 1 and %d, got %d", maxKeys, c.Keys)
	}
	if c.Batch < 1 || c.Batch > limit.MaxBatch {
		bad("-batch: must be between 1 and %d, got %d", limit.MaxBatch, c.Batch)
	}
	if c.Cost < 0 {
		bad("-cost: must be 0 or more, got %d", c.Cost)
	}
	if err := limit.ValidateKey(c.KeyPrefix + "0"); err != nil {
		bad("-key-prefix: %v", err)
	}
	if c.SendShare < 0 || c.SendShare > 1 {
		bad("-send-share: must be between 0 and 1, got %g", c.SendShare)
	}
	if c.OnlyRedisBenchmark && c.RedisBenchmark == "" {
		bad("-only-redis-benchmark: needs -redis-benchmark")
	}
	if c.RedisBenchmark != "" {
		if _, err := redisAddr(c.RedisBenchmark, c.AllowRemote); err != nil {
			bad("-redis-benchmark: %v", err)
		}
		if c.RedisClients < 1 || c.RedisClients > 1000 {
			bad("-redis-clients: must be between 1 and 1000, got %d", c.RedisClients)
		}
		if c.Capacity < 1 || !(c.Refill > 0) {
			bad("-bucket-capacity and -bucket-refill: must be above 0")
		}
	}
	return errors.Join(errs...)
}

// checkTarget refuses URLs that are not http(s) on a loopback host unless
// remote targets are allowed: a load test aimed at the wrong host is an
// attack.
func checkTarget(flagName, raw string, allowRemote bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s: want http://host:port, got %q", flagName, raw)
	}
	if !allowRemote && !isLoopback(u.Hostname()) {
		return fmt.Errorf("%s: %s is not localhost/127.0.0.1/::1 (add -allow-remote if you mean it)", flagName, u.Hostname())
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func randomInt(n int64) int64 {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		return 0
	}
	return v.Int64()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run is the whole program, its outside world passed in.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseFlags(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.OnlyRedisBenchmark {
		rb, err := redisBenchmark(ctx, c, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "redis-benchmark %.0f EVALSHA/s\n", rb)
		return nil
	}
	stopProfile, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	r, err := attack(ctx, c, stdout)
	stopProfile()
	if err != nil {
		return err
	}
	if c.RedisBenchmark == "" || ctx.Err() != nil {
		return nil
	}
	rb, err := redisBenchmark(ctx, c, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nratio         otpguard %.0f checks/s / redis-benchmark %.0f EVALSHA/s = %.3f\n",
		r.ChecksPerSecond, rb, r.ChecksPerSecond/rb)
	if c.Rate > 0 {
		fmt.Fprintf(stdout, "              (otpguard ran at a fixed -rate %d: the ratio says how much of Redis's capacity that rate uses; use -rate 0 for otpguard's own maximum)\n", c.Rate)
	}
	return nil
}

// startCPUProfile profiles this process into path ("": not at all) until
// the returned function is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
