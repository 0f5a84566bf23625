package envoy_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// The request sequences and expected answers of envoyproxy/ratelimit's own
// tests (test/integration/integration_test.go, testBasicBaseConfig, with
// its runtime files basic.yaml and another.yaml) and of its README's
// examples, replayed against otpguard over a real gRPC client and a real
// Redis. Each test runs once on one instance, and again over two instances
// sharing Redis (alternating calls) and on Redis Cluster (cluster_test.go).

const basicYAML = `
domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`

const anotherYAML = `
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`

// clients returns the clients a sequence alternates over: one instance,
// or several sharing one Redis.
type clients []pb.RateLimitServiceClient

func (c clients) at(i int) pb.RateLimitServiceClient { return c[i%len(c)] }

// singleRedis starts n instances on the Redis at url, each with its own
// client, sharing a key prefix of their own.
func singleRedis(url string, n int) setup {
	return func(t *testing.T, rules func() *envoy.Rules) clients {
		prefix := redistest.Prefix()
		var cs clients
		for range n {
			cs = append(cs, start(t, storeAt(t, url, prefix), rules(), envoy.Options{}).client)
		}
		return cs
	}
}

// storeAt is a store on the Redis at url, built as otpguard builds it,
// with a generous timeout (a busy machine is slow, not down).
func storeAt(t *testing.T, url, prefix string) *store.Redis {
	t.Helper()
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	s := store.NewRedis(rdb, prefix)
	if err := s.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

type setup func(t *testing.T, rules func() *envoy.Rules) clients

func TestPeerSequences(t *testing.T) {
	url := redistest.New(t).URL
	runPeerSequences(t, map[string]setup{"one instance": singleRedis(url, 1), "two instances": singleRedis(url, 2)})
}

func runPeerSequences(t *testing.T, setups map[string]setup) {
	for name, s := range setups {
		t.Run(name, func(t *testing.T) {
			t.Run("basic", func(t *testing.T) {
				testBasic(t, s(t, func() *envoy.Rules { return rulesOf(t, basicYAML, anotherYAML) }))
			})
			for _, ex := range readmeExamples {
				t.Run(ex.name, func(t *testing.T) { ex.run(t, s(t, func() *envoy.Rules { return rulesOf(t, ex.yaml) })) })
			}
		})
	}
}

// testBasic is the peer's testBasicBaseConfig, without its stats.
func testBasic(t *testing.T, c clients) {
	expect(t, c.at(0), "unknown domain", request("foo", [][][2]string{{{"hello", "world"}}}, 1), response(OK, noLimit()))
	expect(t, c.at(1), "key1", request("basic", [][][2]string{{{"key1", "foo"}}}, 1), response(OK, status(OK, 50, SEC, 49)))

	v := strconv.Itoa(rand.Int())
	for i := range 25 {
		code, remaining := OK, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = OVER, 0
		}
		expect(t, c.at(i), fmt.Sprintf("key2 call %d", i), request("another", [][][2]string{{{"key2", v}}}, 1),
			response(code, status(code, 20, MIN, remaining)))
	}

	// Two keys in one request: key3's denial does not stop key2 counting
	// (the peer's default, without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	v = strconv.Itoa(rand.Int())
	for i := range 15 {
		code, rem1, rem2 := OK, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			code, rem2 = OVER, 0
		}
		expect(t, c.at(i), fmt.Sprintf("key2+key3 call %d", i),
			request("another", [][][2]string{{{"key2", v}}, {{"key3", v}}}, 1),
			response(code, status(OK, 20, MIN, rem1), status(code, 10, HOUR, rem2)))
	}
}

type example struct {
	name string
	yaml string
	run  func(t *testing.T, c clients)
}

// readmeExamples are the configurations of the peer's README ("Examples")
// and what its rules promise for them.
var readmeExamples = []example{
	{name: "example 2 nested descriptors", yaml: `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`, run: func(t *testing.T, c clients) {
		for i := range 7 {
			code, rem := OK, uint32(5-(i+1))
			if i >= 5 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("call %d", i), request("messaging", [][][2]string{
				{{"message_type", "marketing"}, {"to_number", "2061111111"}},
				{{"to_number", "2061111111"}},
			}, 1), response(code, status(code, 5, DAY, rem), status(OK, 100, DAY, uint32(100-(i+1)))))
		}
		// Another number has limits of its own; another message type no rule.
		expect(t, c.at(0), "other number", request("messaging", [][][2]string{
			{{"message_type", "marketing"}, {"to_number", "2062222222"}},
			{{"message_type", "transactional"}, {"to_number", "2062222222"}},
		}, 1), response(OK, status(OK, 5, DAY, 4), noLimit()))
	}},
	{name: "example 3 most specific match", yaml: `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`, run: func(t *testing.T, c clients) {
		for i := range 3 {
			expect(t, c.at(i), "blocked address", request("edge_proxy_per_ip", [][][2]string{{{"remote_address", "50.0.0.5"}}}, 1),
				response(OVER, status(OVER, 0, SEC, 0)))
		}
		for i := range 11 {
			code, rem := OK, uint32(10-(i+1))
			if i >= 10 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("address call %d", i), request("edge_proxy_per_ip", [][][2]string{{{"remote_address", "50.0.0.1"}}}, 1),
				response(code, status(code, 10, SEC, rem)))
		}
	}},
	{name: "example 4 depth must match", yaml: `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
  - key: nested
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`, run: func(t *testing.T, c clients) {
		expect(t, c.at(0), "deeper than the rule", request("example4", [][][2]string{{{"key", "value"}, {"subkey", "subvalue"}}}, 1),
			response(OK, noLimit()))
		expect(t, c.at(1), "nested rule", request("example4", [][][2]string{{{"nested", "value"}, {"subkey", "subvalue"}}}, 1),
			response(OK, status(OK, 300, SEC, 299)))
		expect(t, c.at(0), "shallower than the rule", request("example4", [][][2]string{{{"nested", "value"}}}, 1),
			response(OK, noLimit()))
	}},
	{name: "example 5 unlimited", yaml: `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`, run: func(t *testing.T, c clients) {
		for i := range 3 {
			expect(t, c.at(i), "unlimited", request("internal", [][][2]string{{{"ldap", "x"}}, {{"azure", "y"}}}, 1),
				response(OK, unlimited(), status(OK, 100, MIN, uint32(100-(i+1)))))
		}
	}},
	{name: "example 6 shadow mode", yaml: `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`, run: func(t *testing.T, c clients) {
		for i := range 12 {
			rem := uint32(max(0, 10-(i+1)))
			expect(t, c.at(i), fmt.Sprintf("user-a call %d", i), request("example6", [][][2]string{{{"service", "auth-service"}, {"user", "user-a"}}}, 1),
				response(OK, status(OK, 10, SEC, rem)))
		}
		for i := range 21 {
			code, rem := OK, uint32(20-(i+1))
			if i >= 20 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("user-b call %d", i), request("example6", [][][2]string{{{"service", "auth-service"}, {"user", "user-b"}}}, 1),
				response(code, status(code, 20, SEC, rem)))
		}
	}},
	{name: "example 7 replaces", yaml: `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`, run: func(t *testing.T, c clients) {
		both := [][][2]string{{{"key_1", "value_1"}, {"user", "bkthomps"}}, {{"key_2", "value_2"}, {"user", "bkthomps"}}}
		for i := range 11 {
			code, rem := OK, uint32(10-(i+1))
			if i >= 10 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("both call %d", i), request("example7", both, 1), response(code, noLimit(), status(code, 10, SEC, rem)))
		}
		// The replaced limit was not touched: all 5 are left.
		for i := range 6 {
			code, rem := OK, uint32(5-(i+1))
			if i >= 5 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("specific call %d", i), request("example7", both[:1], 1),
				response(code, named(status(code, 5, SEC, rem), "specific_limit")))
		}
	}},
	{name: "example 9 wildcards", yaml: `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, run: func(t *testing.T, c clients) {
		for i, v := range []string{"value1", "value1", "value1", "valueXYZ"} {
			code, rem := OK, uint32(2-(i+1))
			switch {
			case i == 2:
				code, rem = OVER, 0
			case i == 3: // its own counter: no share_threshold
				rem = 1
			}
			expect(t, c.at(i), "key1="+v, request("example9", [][][2]string{{{"key1", v}}}, 1), response(code, status(code, 2, MIN, rem)))
		}
		expect(t, c.at(0), "middle wildcard", request("example9", [][][2]string{{{"path", "/api/123/action"}}}, 1), response(OK, status(OK, 20, MIN, 19)))
		expect(t, c.at(1), "no match", request("example9", [][][2]string{{{"path", "/api/123/other"}}}, 1), response(OK, noLimit()))
	}},
	{name: "example 11 share threshold", yaml: `
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
`, run: func(t *testing.T, c clients) {
		for i := range 10 {
			f := "files/a.pdf"
			if i >= 5 {
				f = "files/b.csv"
			}
			expect(t, c.at(i), fmt.Sprintf("shared call %d", i), request("example11", [][][2]string{{{"files", f}}}, 1), response(OK, status(OK, 10, HOUR, uint32(10-(i+1)))))
		}
		expect(t, c.at(0), "shared: files/c.txt", request("example11", [][][2]string{{{"files", "files/c.txt"}}}, 1), response(OVER, status(OVER, 10, HOUR, 0)))
		for i := range 11 {
			code, rem := OK, uint32(10-(i+1))
			if i >= 10 {
				code, rem = OVER, 0
			}
			expect(t, c.at(i), fmt.Sprintf("isolated call %d", i), request("example11", [][][2]string{{{"files_no_share", "files_no_share/a.pdf"}}}, 1), response(code, status(code, 10, HOUR, rem)))
		}
		expect(t, c.at(1), "isolated: b.csv", request("example11", [][][2]string{{{"files_no_share", "files_no_share/b.csv"}}}, 1), response(OK, status(OK, 10, HOUR, 9)))
	}},
	{name: "hits_addend", yaml: anotherYAML, run: func(t *testing.T, c clients) {
		v := strconv.Itoa(rand.Int())
		one := [][][2]string{{{"key2", v}}}
		expect(t, c.at(0), "addend 5", request("another", one, 5), response(OK, status(OK, 20, MIN, 15)))
		expect(t, c.at(1), "descriptor addend 0 peeks", withHits(request("another", one, 5), 0, 0), response(OK, status(OK, 20, MIN, 15)))
		expect(t, c.at(0), "addend 15", request("another", one, 15), response(OK, status(OK, 20, MIN, 0)))
		expect(t, c.at(1), "addend 1 over", request("another", one, 1), response(OVER, status(OVER, 20, MIN, 0)))
		// A hit that denies counts, as the peer counts it: the window stays over.
		w := strconv.Itoa(rand.Int())
		expect(t, c.at(0), "addend 25 over the limit", request("another", [][][2]string{{{"key2", w}}}, 25), response(OVER, status(OVER, 20, MIN, 0)))
		expect(t, c.at(1), "then 1", request("another", [][][2]string{{{"key2", w}}}, 1), response(OVER, status(OVER, 20, MIN, 0)))
	}},
	{name: "quota mode", yaml: `
domain: quota
descriptors:
  - key: q1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: q2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`, run: func(t *testing.T, c clients) {
		both := [][][2]string{{{"q1", "a"}}, {{"q2", "a"}}}
		expect(t, c.at(0), "both within", request("quota", both, 1), response(OK, status(OK, 1, MIN, 0), status(OK, 2, MIN, 1)))
		expect(t, c.at(1), "one quota left", request("quota", both, 1), response(OK, status(OVER, 1, MIN, 0), status(OK, 2, MIN, 0)))
		expect(t, c.at(0), "every quota spent", request("quota", both, 1), response(OVER, status(OVER, 1, MIN, 0), status(OVER, 2, MIN, 0)))
	}},
}

// TestShouldRateLimitRefusesEmpty: a request without domain or
// descriptors is the gateway's mistake, not an outage.
func TestShouldRateLimitRefusesEmpty(t *testing.T) {
	in := startWith(t, limit.New(nil, nil, nil), rulesOf(t, basicYAML), envoy.Options{})
	for _, req := range []*pb.RateLimitRequest{{Domain: "basic"}, request("", [][][2]string{{{"key1", "x"}}}, 1)} {
		if _, err := in.client.ShouldRateLimit(t.Context(), req); err == nil {
			t.Errorf("ShouldRateLimit(%v): no error, want InvalidArgument", req)
		}
	}
}
