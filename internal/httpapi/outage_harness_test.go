package httpapi_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// outageOptions shape an outage cluster.
type outageOptions struct {
	// Timeout is OTPGUARD_REDIS_TIMEOUT: the default 10ms for the tests of a
	// dead Redis, 1s or more where exactness is checked.
	Timeout time.Duration
	// Instances is OTPGUARD_INSTANCES; 0 learns N from heartbeats.
	Instances int
	// URL overrides where the instances find Redis (a refused port).
	URL     string
	Breaker resilience.BreakerOptions
	// Output receives the instances' JSON log (default: discarded), at
	// LogLevel (default "error").
	Output   io.Writer
	LogLevel string
}

// outageCluster is n instances built by app.New (Redis client with the
// timeout, heartbeat, Fallback, OTP, Limiter, ops, status), all reaching
// one private redis-server through a proxy the test can black-hole.
type outageCluster struct {
	*cluster
	redis *redistest.Server
	proxy *redistest.Proxy
	fbs   []*resilience.Fallback
	hbs   []*store.Heartbeat
}

func newOutageCluster(t *testing.T, n int, policies guard.Policies, o outageOptions) *outageCluster {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Millisecond
	}
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	url := proxy.URL()
	if o.URL != "" {
		url = o.URL
	}
	cfg := testConfig(t, url, redistest.Prefix(), t.TempDir(), policies)
	// The production ceiling (OTPGUARD_REDIS_MAX_WAIT unset), not the
	// exactness tests' generous one.
	cfg.RedisTimeout, cfg.RedisMaxWait, cfg.Instances = o.Timeout, 0, o.Instances
	if o.LogLevel != "" {
		cfg.LogLevel = o.LogLevel
	}
	if o.Output == nil {
		o.Output = io.Discard
	}
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	oc := &outageCluster{cluster: &cluster{out: &guardtest.Outbox{}, prefix: cfg.RedisPrefix, url: url}, redis: srv, proxy: proxy}
	for range n {
		in := startInstance(t, cfg, oc.out, app.WithHeartbeat(100*time.Millisecond, time.Second), app.WithBreaker(o.Breaker), app.WithOutput(o.Output))
		oc.instances = append(oc.instances, in)
		oc.fbs = append(oc.fbs, in.app.Fallback())
		oc.hbs = append(oc.hbs, in.app.Heartbeat())
	}
	return oc
}

func (oc *outageCluster) waitInstances(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, f := range oc.fbs {
		for f.Instances() != n {
			if time.Now().After(deadline) {
				t.Fatalf("instances never counted %d live instances (got %d)", n, f.Instances())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitBreakers waits until every instance's breaker is in state.
func (oc *outageCluster) waitBreakers(t *testing.T, state string, poke func(i int)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i, f := range oc.fbs {
		for f.Status().Breaker != state {
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: breaker %s, never %s", i, f.Status().Breaker, state)
			}
			if poke != nil {
				poke(i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitRecovered waits until every instance's breaker is closed and none of
// its policies is in fallback, poking until then. The breaker closing is
// not enough: a decision after it may still miss a 10 ms timeout on a busy
// machine, and then its policy is rightly reported in fallback until its
// next decision reaches Redis.
func (oc *outageCluster) waitRecovered(t *testing.T, poke func(i int)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i, f := range oc.fbs {
		for s := f.Status(); s.Breaker != "closed" || len(s.InFallback()) > 0; s = f.Status() {
			if time.Now().After(deadline) {
				t.Fatalf("instance %d: never recovered: breaker %s, in fallback %v", i, s.Breaker, s.InFallback())
			}
			poke(i)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// keysWithoutTTL lists the cluster's keys that would live forever.
func (oc *outageCluster) keysWithoutTTL(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	c := redistest.Client(t, oc.redis.URL())
	var bad []string
	iter := c.Scan(ctx, 0, oc.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		ttl, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if ttl == -1 { // go-redis: -1 for a key without TTL, -2 for one gone since the scan
			bad = append(bad, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return bad
}
