package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
)

// tokenBucketLua is the store's token bucket script: redis-benchmark runs
// it by the SHA otpguard itself loads.
var tokenBucketLua, tokenBucketSHA = store.TokenBucketScript()

// redisTarget is where redis-benchmark connects.
type redisTarget struct {
	Host, Port, User, Password string
	DB                         int
}

func (t redisTarget) Addr() string { return net.JoinHostPort(t.Host, t.Port) }

// redisAddr reads a redis:// URL or host:port, loopback only unless
// allowRemote.
func redisAddr(raw string, allowRemote bool) (redisTarget, error) {
	var t redisTarget
	if strings.Contains(raw, "://") {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return t, err
		}
		if opt.TLSConfig != nil {
			return t, fmt.Errorf("rediss:// is not supported by this command")
		}
		raw, t.User, t.Password, t.DB = opt.Addr, opt.Username, opt.Password, opt.DB
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil {
		return t, fmt.Errorf("want redis://host:port/db or host:port, got %q", raw)
	}
	if !allowRemote && !isLoopback(host) {
		return t, fmt.Errorf("%s is not localhost/127.0.0.1/::1 (add -allow-remote if you mean it)", host)
	}
	t.Host, t.Port = host, port
	return t, nil
}

// interval is the microseconds one token takes to refill, rounded as
// internal/store rounds it.
func interval(ratePerSecond float64) string {
	return strconv.FormatFloat(math.Round(1e6/ratePerSecond*1000)/1000, 'f', -1, 64)
}

// redisBenchmark runs redis-benchmark with EVALSHA of the token bucket
// script, c.RedisClients clients, for about c.Duration, and returns its
// rate. redis-benchmark counts requests, not time: a short first run
// measures the rate, the second runs rate x duration requests.
func redisBenchmark(ctx context.Context, c *Config, out io.Writer) (float64, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return 0, fmt.Errorf("-redis-benchmark: redis-benchmark is not installed (apt-get install redis-tools): %w", err)
	}
	t, err := redisAddr(c.RedisBenchmark, c.AllowRemote)
	if err != nil {
		return 0, err
	}
	sha, err := loadScript(ctx, t, out)
	if err != nil {
		return 0, err
	}

	args := []string{"-h", t.Host, "-p", t.Port, "--dbnum", strconv.Itoa(t.DB), "-c", strconv.Itoa(c.RedisClients),
		"-r", strconv.Itoa(c.Keys), "--csv"}
	if t.Password != "" {
		args = append(args, "-a", t.Password)
		if t.User != "" {
			args = append(args, "--user", t.User)
		}
	}
	// The same key shape, bucket and cost as otpguard's check; its own
	// prefix, and every key it writes has a TTL (the script's PX).
	key := c.RedisPrefix + "l:" + c.Policy + "{rb:__rand_int__}"
	script := []string{"EVALSHA", sha, "1", key, strconv.FormatInt(c.Capacity, 10), interval(c.Refill), strconv.FormatInt(c.Cost, 10)}

	calibrate := 20_000
	fmt.Fprintf(out, "\nredis-benchmark %s %s on %s: calibrating with %d requests\n", strings.Join(script, " "), clientsFlag(c), t.Addr(), calibrate)
	r, err := runRedisBenchmark(ctx, bin, args, calibrate, script)
	if err != nil {
		return 0, err
	}
	n := max(calibrate, int(r.RPS*c.Duration.Seconds()))
	fmt.Fprintf(out, "redis-benchmark running %d requests (~%s at %.0f/s)\n", n, c.Duration, r.RPS)
	start := time.Now()
	r, err = runRedisBenchmark(ctx, bin, args, n, script)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "redis-benchmark %d EVALSHA in %s: %.1f/s  p50 %sms  p99 %sms  max %sms\n",
		n, time.Since(start).Round(time.Millisecond), r.RPS, r.P50, r.P99, r.Max)
	return r.RPS, nil
}

func clientsFlag(c *Config) string { return fmt.Sprintf("-c %d -r %d", c.RedisClients, c.Keys) }

// loadScript loads the token bucket script and says whether the Redis
// already had it, i.e. whether otpguard (which loads its scripts at
// start-up) runs this very script there.
func loadScript(ctx context.Context, t redisTarget, out io.Writer) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: t.Addr(), Username: t.User, Password: t.Password, DB: t.DB,
		DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	want := tokenBucketSHA
	exists, err := rdb.ScriptExists(ctx, want).Result()
	if err != nil {
		return "", fmt.Errorf("redis %s: %w", t.Addr(), err)
	}
	if len(exists) == 1 && exists[0] {
		fmt.Fprintf(out, "\nscript        %s is in this Redis's script cache: the same token bucket script otpguard loaded\n", want)
	} else {
		fmt.Fprintf(out, "\nscript        %s was not in this Redis's script cache (otpguard not started on it, or the cache was flushed): loading it\n", want)
	}
	sha, err := rdb.ScriptLoad(ctx, tokenBucketLua).Result()
	if err != nil {
		return "", fmt.Errorf("redis %s: script load: %w", t.Addr(), err)
	}
	if sha != want {
		return "", fmt.Errorf("redis %s: script load answered SHA %s, want %s", t.Addr(), sha, want)
	}
	return sha, nil
}

type benchResult struct {
	RPS           float64
	P50, P99, Max string
}

func runRedisBenchmark(ctx context.Context, bin string, args []string, n int, script []string) (benchResult, error) {
	argv := append(append(slices.Clone(args), "-n", strconv.Itoa(n)), script...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return benchResult{}, fmt.Errorf("redis-benchmark: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseBenchCSV(stdout.Bytes())
}

// parseBenchCSV reads redis-benchmark --csv: a header line
// "test","rps","avg_latency_ms",... and one line per test.
func parseBenchCSV(b []byte) (benchResult, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) < 2 {
		return benchResult{}, fmt.Errorf("redis-benchmark: unexpected output %q", b)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	row := recs[1]
	get := func(name string) string {
		if i, ok := col[name]; ok && i < len(row) {
			return row[i]
		}
		return "?"
	}
	rps, err := strconv.ParseFloat(get("rps"), 64)
	if err != nil || rps <= 0 {
		return benchResult{}, fmt.Errorf("redis-benchmark: no rate in %q", b)
	}
	if strings.Contains(get("test"), "ERR") {
		return benchResult{}, fmt.Errorf("redis-benchmark: %s", get("test"))
	}
	return benchResult{RPS: rps, P50: get("p50_latency_ms"), P99: get("p99_latency_ms"), Max: get("max_latency_ms")}, nil
}
