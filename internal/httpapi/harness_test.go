package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

const (
	apiKey = "test-api-key-0123456789"
	opsKey = "test-ops-key-0123456789"
)

// instance is one otpguard server with its own Redis client, as one of
// several stateless instances behind a load balancer. It is built by
// app.New, as the binary builds it.
type instance struct {
	srv *httptest.Server
	rdb redis.UniversalClient
	app *app.App
	out *guardtest.Outbox // what it was asked to send (shared in a cluster)
}

// cluster is several instances sharing one Redis, one key prefix, one HMAC
// key and one outbox.
type cluster struct {
	instances []*instance
	out       *guardtest.Outbox
	prefix    string
	url       string
}

// testRedisTimeout and testRedisMaxWait are a test instance's Redis
// budget: the timeout (the most OTPGUARD_REDIS_TIMEOUT allows) while the
// probe does not vouch for Redis, the ceiling while it does. Exactness
// tests must not confuse a CPU-starved decision with an outage or an
// overload. 5 s for both was not enough: with 150 sends at once under
// -race at load 14 and a busy loop, a decision of
// TestSendLimitsTogetherExactAcrossInstances waited past it (2 runs in 15
// answered 503 overloaded or store_unavailable). Outage tests set a short
// timeout of their own (outage_harness_test.go).
const (
	testRedisTimeout = 10 * time.Second
	testRedisMaxWait = 30 * time.Second
)

// hmacKey is the code key every test instance shares.
var hmacKey = []byte("0123456789abcdef0123456789abcdef")

// testConfig is the configuration of a test instance on the Redis at url:
// the production defaults, with the test's keys and policies, a SQLite
// store in dataDir and a generous Redis timeout (testRedisTimeout).
func testConfig(t testing.TB, url, prefix, dataDir string, policies guard.Policies) *config.Config {
	t.Helper()
	cfg, err := config.Load(func(string) string { return "" })
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.RedisTimeout, cfg.RedisMaxWait = url, prefix, testRedisTimeout, testRedisMaxWait
	cfg.APIKeys, cfg.OpsKeys, cfg.HMACKey = []string{apiKey}, []string{opsKey}, hmacKey
	cfg.DataDir, cfg.LogLevel = dataDir, "error"
	policies.FillDefaults()
	cfg.Policies = policies
	return cfg
}

// startInstance builds one instance with app.New and serves it.
func startInstance(t testing.TB, cfg *config.Config, out *guardtest.Outbox, opts ...app.Option) *instance {
	t.Helper()
	opts = append([]app.Option{app.WithSender(out), app.WithOutput(io.Discard)}, opts...)
	a, err := app.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { srv.Close(); a.Close() })
	return &instance{srv: srv, rdb: a.Redis(), app: a, out: out}
}

// realCluster starts n instances on a real Redis.
func realCluster(t *testing.T, n int, policies guard.Policies) *cluster {
	t.Helper()
	tg := redistest.New(t)
	return newCluster(t, n, tg.URL, tg.Prefix, policies)
}

// miniCluster starts n instances on one miniredis (fast unit tests).
func miniCluster(t *testing.T, n int, policies guard.Policies, opts ...app.Option) (*cluster, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	// Frozen: miniredis moves TIME with the wall clock but TTLs only on
	// FastForward, so a bucket read back drifts; tests move time themselves.
	m.SetTime(time.Now())
	cfg := testConfig(t, "redis://"+m.Addr(), redistest.Prefix(), t.TempDir(), policies)
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	c := &cluster{out: &guardtest.Outbox{}, prefix: cfg.RedisPrefix, url: cfg.RedisURL}
	for range n {
		// Handed over: start-up's version check asks INFO server, which
		// miniredis does not answer.
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Close() })
		c.instances = append(c.instances, startInstance(t, cfg, c.out, append([]app.Option{app.WithRedis(rdb)}, opts...)...))
	}
	return c, m
}

// newCluster starts n instances on the Redis at url, sharing one SQLite
// store.
func newCluster(t *testing.T, n int, url, prefix string, policies guard.Policies, opts ...app.Option) *cluster {
	t.Helper()
	return newClusterConfig(t, n, testConfig(t, url, prefix, t.TempDir(), policies), opts...)
}

// newClusterConfig starts n instances of cfg (redis_cluster_test.go
// connects them to a Redis Cluster).
func newClusterConfig(t *testing.T, n int, cfg *config.Config, opts ...app.Option) *cluster {
	t.Helper()
	if err := cfg.Policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	c := &cluster{out: &guardtest.Outbox{}, prefix: cfg.RedisPrefix, url: cfg.RedisURL}
	for range n {
		c.instances = append(c.instances, startInstance(t, cfg, c.out, opts...))
	}
	return c
}

// response is what a test reads back.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// do sends a request to instance i with the API key.
func (c *cluster) do(t testing.TB, i int, method, path, body string) response {
	return c.doKey(t, i, method, path, body, apiKey)
}

func (c *cluster) doKey(t testing.TB, i int, method, path, body, key string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.instances[i%len(c.instances)].srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if strings.HasPrefix(path, "/otp/") {
		c.flushWatch(t)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// flushWatch waits until every instance's conversion watch has counted
// and judged what it was handed (it runs after the answer): a test reads
// the watch's results, in the order of its requests, as if it ran inline.
func (c *cluster) flushWatch(t testing.TB) {
	t.Helper()
	for _, in := range c.instances {
		if err := in.app.FlushWatch(context.Background()); err != nil {
			t.Errorf("flushing the conversion watch: %v", err)
		}
	}
}

// defaults are the default policies with challenges off: the rules' own
// refusals are what most tests look at; challenge_test.go turns them on.
func defaults() guard.Policies {
	p := guard.DefaultPolicies()
	p.OTP.Challenge.Type = guard.ChallengeOff
	return p
}
