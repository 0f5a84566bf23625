package store_test

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The default timeout. How long a call against a hurt Redis really takes is
// measured by BenchmarkOutageDecision (docs/outage.md), not asserted here:
// a wall-clock bound fails on a busy machine, not on a broken client.
const timeout = 10 * time.Millisecond

// deadlines is a go-redis hook added after otpguard's own: it sees every
// call as the client is about to make it, and records how far off its
// deadline is (noDeadline: none). With ContextTimeoutEnabled, go-redis
// holds every step of the call (pool wait, dial, handshake, write, read)
// to it.
type deadlines struct {
	mu   sync.Mutex
	left []time.Duration
}

const noDeadline = time.Duration(math.MaxInt64)

func (h *deadlines) note(ctx context.Context) {
	left := noDeadline
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl) // <= 0 when this goroutine was starved past it
	}
	h.mu.Lock()
	h.left = append(h.left, left)
	h.mu.Unlock()
}

// take returns what was recorded since the last take.
func (h *deadlines) take() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.left
	h.left = nil
	return l
}

func (h *deadlines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *deadlines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}

func (h *deadlines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}

// isTimeout reports whether err is a deadline running out (the context's,
// or a socket's set from it).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// timeoutClient is a client as otpguard builds it, with the default timeout.
func timeoutClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: url, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// warm makes a few good calls so that the pool holds live connections (a
// CPU-starved round trip may miss the 10 ms timeout: retry).
func warm(t *testing.T, s *store.Redis) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	ok := 0
	for ok < 3 {
		if _, err := s.Counters.Take(context.Background(), []limit.Take{fw("warm", 1000, time.Minute, 0)}); err == nil {
			ok++
		} else if time.Now().After(deadline) {
			t.Fatalf("redis never answered within %v: %v", timeout, err)
		}
	}
}

// TestRedisTimeoutHolds hurts a real Redis in each way it fails in
// production and checks every call fails, held to the timeout: it reaches
// the client with a deadline at most one timeout away (which every step of
// it keeps: TestRedisClientsHoldTheTimeout), and where Redis is silent it is
// that deadline, not TCP or a retry, that ends it. Timing it would prove
// only how busy the machine was.
func TestRedisTimeoutHolds(t *testing.T) {
	t.Parallel() // each case has its own redis-server and proxy
	tests := []struct {
		name string
		// hurt breaks Redis; the client was warmed on it first unless
		// cold. silent: Redis neither answers nor refuses, so only the
		// deadline can end a call.
		hurt   func(t *testing.T, srv *redistest.Server, proxy *redistest.Proxy) (cold bool)
		silent bool
	}{
		{name: "killed", hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Kill()
			return false
		}},
		{name: "refused", hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Kill()
			return true
		}},
		{name: "paused", silent: true, hurt: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) bool {
			srv.Pause(time.Minute) // outlasts the test: the server is killed at its end
			return false
		}},
		{name: "black-holed", silent: true, hurt: func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) bool {
			proxy.BlackHole()
			return false
		}},
		{name: "black-holed dial", silent: true, hurt: func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) bool {
			proxy.BlackHole()
			return true
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			prefix := redistest.Prefix()
			rdb := timeoutClient(t, proxy.URL())
			s := store.NewRedis(rdb, prefix)
			warm(t, s)
			if cold := tc.hurt(t, srv, proxy); cold {
				rdb = timeoutClient(t, proxy.URL())
				s = store.NewRedis(rdb, prefix)
			}
			h := &deadlines{}
			rdb.AddHook(h)
			ctx := context.Background()
			calls := map[string]func() error{
				"take": func() error {
					_, err := s.Counters.Take(ctx, []limit.Take{fw("k", 5, time.Minute, 1), tb("k", 5, 1, 1)})
					return err
				},
				"guess": func() error {
					_, err := s.Codes.GuessCode(ctx, "+14155550100", guard.GuessOf{}, time.Now())
					return err
				},
				"save": func() error { _, err := s.Codes.SaveCode(ctx, newCode("+14155550100", []byte("mac"))); return err },
			}
			for range 10 {
				for name, call := range calls {
					h.take()
					err := call()
					if err == nil {
						t.Fatalf("%s: succeeded against a hurt Redis", name)
					}
					if errors.Is(err, guard.ErrNotFound) {
						t.Fatalf("%s: ErrNotFound, want a store error", name)
					}
					if tc.silent && !isTimeout(err) {
						t.Errorf("%s: %v; want the timeout's deadline to end the call", name, err)
					}
					left := h.take()
					if len(left) == 0 {
						t.Fatalf("%s: the hook saw no call", name)
					}
					for _, l := range left {
						if l == noDeadline {
							t.Errorf("%s: reached the client without a deadline, want one at most the timeout %v away", name, timeout)
						} else if l > timeout {
							t.Errorf("%s: reached the client with %v left before its deadline, want at most the timeout %v", name, l, timeout)
						}
					}
				}
			}
		})
	}
}
