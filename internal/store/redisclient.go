package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions says where Redis is and how long otpguard may wait for it.
type RedisOptions struct {
	URL     string        // redis://[user:pass@]host:port/db or rediss://
	Timeout time.Duration // of one call, dial included (OTPGUARD_REDIS_TIMEOUT)
	// MaxWait, when longer than Timeout, is what each step of a call (dial,
	// pool, write, read) may take instead: the guard's Fallback then holds
	// a call to Timeout only while the probe does not vouch for Redis, and
	// waits up to MaxWait while it does (OTPGUARD_REDIS_MAX_WAIT).
	MaxWait  time.Duration
	PoolSize int // 0: go-redis's default (10 per CPU)

	// Mode is RedisSingle (URL), RedisCluster or RedisSentinel (Addrs);
	// see NewUniversalClient (redismodes.go). "" is RedisSingle.
	Mode   string
	Addrs  []string // cluster seed nodes, or the sentinels
	Master string   // the Sentinel master name
	// Username and Password, when set, replace those of URL.
	Username, Password string
	TLS                bool // cluster and sentinel: TLS to every node
}

// NewRedisClient builds a client whose every call returns within Timeout.
// go-redis's defaults would not: it ignores context deadlines unless
// ContextTimeoutEnabled is set, retries failed commands (and a retried INCR
// can count twice), and retries failed dials five times 100 ms apart.
func NewRedisClient(o RedisOptions) (*redis.Client, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("store: redis url: %w", err)
	}
	applyTimeouts(opt, o.stepTimeout())
	if o.Username != "" {
		opt.Username = o.Username
	}
	if o.Password != "" {
		opt.Password = o.Password
	}
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
		opt.MinIdleConns = min(opt.MinIdleConns, o.PoolSize)
	}
	rdb := redis.NewClient(opt)
	rdb.AddHook(timeoutHook(o.stepTimeout()))
	return rdb, nil
}

// stepTimeout is what one step of a call may take: MaxWait when set
// (the caller then bounds calls itself), else Timeout.
func (o RedisOptions) stepTimeout() time.Duration { return max(o.Timeout, o.MaxWait) }

// timeoutHook gives every call whose context has no deadline one of timeout,
// for the whole call. The per-step timeouts alone do not add up to it: a
// transaction on a fresh connection pays the dial, the handshake (HELLO)
// and the command, each with its own ReadTimeout (measured: two timeouts
// against a black-holed Redis). With ContextTimeoutEnabled, go-redis holds
// every step to the context's deadline. A caller that set its own deadline
// (start-up, the heartbeat) keeps it; each step is still held to the timeout.
type timeoutHook time.Duration

func (h timeoutHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h timeoutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := h.bound(ctx)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h timeoutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := h.bound(ctx)
		defer cancel()
		return next(ctx, cmds)
	}
}

func (h timeoutHook) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || h <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(h))
}

// minIdleConns is how many connections the pool keeps open while idle, so
// that a burst, or the first decisions after an outage, find a connection
// without dialing inside a decision.
const minIdleConns = 8

func applyTimeouts(opt *redis.Options, timeout time.Duration) {
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = timeout
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.PoolTimeout = timeout
	opt.MaxRetries = -1             // never retry: a timed-out INCR may have counted
	opt.DialerRetries = 1           // one dial attempt, no 100 ms back-off loop
	opt.MinIdleConns = minIdleConns // keep warm connections: a dial costs a round trip
	opt.DisableIdentity = true
	// RESP2: otpguard subscribes to nothing and caches nothing client-side,
	// and on RESP3 go-redis looks for push notifications around every
	// command it reads.
	opt.Protocol = 2
}

// ErrRedisUnreachable marks a start-up check that could not reach Redis at
// all, as opposed to a Redis that answered and is unfit.
var ErrRedisUnreachable = errors.New("redis did not answer")

// CheckRedisVersion refuses a server older than 7: EXPIRE ... NX, which the
// fixed windows rely on, arrived in Redis 7.0. On Redis Cluster every
// master is asked (checkEveryMaster, redismodes.go).
func CheckRedisVersion(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return checkEveryMaster(ctx, c)
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("store: redis info: %w", classifyStartupError(err))
	}
	version, major, err := RedisVersion(info)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if major < 7 {
		return fmt.Errorf("store: Redis %s is too old: otpguard needs Redis 7 or newer (EXPIRE ... NX)", version)
	}
	return nil
}

// classifyStartupError tells a Redis that did not answer (start anyway:
// the breaker probes it) from one that answered no. A wrong password or a
// user who may not run INFO is a configuration error, to be fixed before
// serving, not an outage to ride out on the fallback forever.
func classifyStartupError(err error) error {
	var reply redis.Error
	if !errors.As(err, &reply) || strings.HasPrefix(reply.Error(), "LOADING") || strings.HasPrefix(reply.Error(), "MASTERDOWN") {
		return fmt.Errorf("%w: %w", ErrRedisUnreachable, err) // no answer, or not ready yet
	}
	switch msg := reply.Error(); {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("redis refused the credentials (check the username and password settings): %w", err)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("the redis user may not run INFO, which otpguard needs to check for Redis 7 (grant it +info): %w", err)
	default:
		return fmt.Errorf("redis answered with an error: %w", err)
	}
}

// RedisVersion reads redis_version from the text of INFO server.
func RedisVersion(info string) (version string, major int, err error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	major, err = strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if err != nil {
		return version, 0, fmt.Errorf("cannot read the Redis version from INFO (%q)", version)
	}
	return version, major, nil
}
