package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpapi"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

const (
	apiKey = "test-api-key-0123456789"
	opsKey = "test-ops-key-0123456789"
)

// outbox is a guard.Sender that keeps what it was asked to send.
type outbox struct {
	mu   sync.Mutex
	sent []guard.Message
	// fail, when set, is returned instead of sending.
	fail error
}

func (o *outbox) Send(_ context.Context, m guard.Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail != nil {
		return o.fail
	}
	o.sent = append(o.sent, m)
	return nil
}

func (o *outbox) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sent)
}

// lastCode returns the code of the last message sent to phone.
func (o *outbox) lastCode(t *testing.T, phone string) string {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.sent) - 1; i >= 0; i-- {
		if o.sent[i].To == phone {
			f := strings.Fields(o.sent[i].Body)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no message was sent to %s", phone)
	return ""
}

// instance is one otpguard server with its own Redis client, as one of
// several stateless instances behind a load balancer.
type instance struct {
	srv *httptest.Server
	rdb redis.UniversalClient
}

// cluster is several instances sharing one Redis, one key prefix, one HMAC
// key and one outbox.
type cluster struct {
	instances []*instance
	out       *outbox
	prefix    string
	url       string
}

// realCluster starts n instances on a real Redis.
func realCluster(t *testing.T, n int, policies guard.Policies) *cluster {
	t.Helper()
	tg := redistest.New(t)
	return newCluster(t, n, tg.URL, tg.Prefix, policies)
}

// miniCluster starts n instances on one miniredis (fast unit tests).
func miniCluster(t *testing.T, n int, policies guard.Policies) (*cluster, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	// Frozen: miniredis moves TIME with the wall clock but TTLs only on
	// FastForward, so a bucket read back drifts; tests move time themselves.
	m.SetTime(time.Now())
	return newCluster(t, n, "redis://"+m.Addr(), redistest.Prefix(), policies), m
}

func newCluster(t *testing.T, n int, url, prefix string, policies guard.Policies) *cluster {
	t.Helper()
	return newClusterWith(t, n, url, prefix, policies, func(t *testing.T) (redis.UniversalClient, *store.Redis) {
		// A generous budget: exactness tests must not confuse a CPU-starved
		// round trip under -race with an outage.
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: url, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return rdb, store.NewRedis(rdb, prefix)
	})
}

// newClusterWith starts n instances, each on the client and store connect
// returns (redis_cluster_test.go connects to a Redis Cluster).
func newClusterWith(t *testing.T, n int, url, prefix string, policies guard.Policies,
	connect func(t *testing.T) (redis.UniversalClient, *store.Redis)) *cluster {
	t.Helper()
	policies.FillDefaults()
	if err := policies.Validate(); err != nil {
		t.Fatalf("policies: %v", err)
	}
	c := &cluster{out: &outbox{}, prefix: prefix, url: url}
	hmacKey := []byte("0123456789abcdef0123456789abcdef")
	for range n {
		rdb, st := connect(t)
		t.Cleanup(func() { rdb.Close() })
		otp := guard.NewOTP(guard.OTPOptions{Policy: policies.OTP, Counter: st, Codes: st, Sender: c.out, HMACKey: hmacKey})
		h := httpapi.New(httpapi.Options{
			OTP: otp, Limiter: guard.NewLimiter(policies.Limits, st, nil),
			APIKeys: []string{apiKey}, OpsKeys: []string{opsKey}, Spec: api.OpenAPI,
			Ready: func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		c.instances = append(c.instances, &instance{srv: srv, rdb: rdb})
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
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func defaults() guard.Policies { return guard.DefaultPolicies() }
