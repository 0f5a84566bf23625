package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func limitPolicies() guard.Policies {
	p := defaults()
	p.Limits = map[string]guard.LimitPolicy{
		"api":    {Algorithm: guard.TokenBucket, Capacity: 50, RefillPerSecond: 0.01},
		"search": {Algorithm: guard.FixedWindow, Limit: 30, Window: time.Minute},
		"fast":   {Algorithm: guard.TokenBucket, Capacity: 5, RefillPerSecond: 20},
		"shadow": {Algorithm: guard.TokenBucket, Capacity: 1, RefillPerSecond: 0.01, Shadow: true},
	}
	return p
}

func TestLimitBurstIsExact(t *testing.T) { limitBurstIsExact(t, realCluster) }

func limitBurstIsExact(t *testing.T, start func(*testing.T, int, guard.Policies) *cluster) {
	const instances, requests = 4, 200
	for _, tc := range []struct {
		policy string
		want   int
	}{{"api", 50}, {"search", 30}} {
		t.Run(tc.policy, func(t *testing.T) {
			c := start(t, instances, limitPolicies())
			statuses := burst(t, c, requests, "/limits/check", func(int) string {
				return fmt.Sprintf(`{"policy":%q,"key":"user:42"}`, tc.policy)
			})
			if statuses[200] != tc.want || statuses[429] != requests-tc.want {
				t.Fatalf("statuses %v over %d instances, want exactly %d x 200 and the rest 429", statuses, instances, tc.want)
			}
		})
	}
}

func TestBucketRefillsOverTime(t *testing.T) {
	c := realCluster(t, 2, limitPolicies())
	check := func(i int) response {
		return c.do(t, i, "POST", "/limits/check", `{"policy":"fast","key":"r"}`)
	}
	for i := range 5 {
		if r := check(i); r.Status != 200 {
			t.Fatalf("take %d of a full bucket of 5: %d", i+1, r.Status)
		}
	}
	r := check(0)
	if r.Status != 429 {
		t.Fatalf("6th take: %d, want 429", r.Status)
	}
	retry := time.Duration(r.json(t)["decisions"].([]any)[0].(map[string]any)["retry_after_ms"].(float64)) * time.Millisecond
	if retry <= 0 || retry > 50*time.Millisecond {
		t.Fatalf("retry_after_ms = %v, want in (0, 50ms] at 20 tokens/s", retry)
	}
	time.Sleep(retry + 10*time.Millisecond)
	if r := check(1); r.Status != 200 {
		t.Fatalf("take after waiting retry_after on another instance: %d %s, want 200", r.Status, r.Body)
	}
}

func TestBatchSpendsAllOrNothing(t *testing.T) {
	c := realCluster(t, 1, limitPolicies())
	batch := func(searchCost int) response {
		return c.do(t, 0, "POST", "/limits/check",
			fmt.Sprintf(`{"checks":[{"policy":"api","key":"b","cost":10},{"policy":"search","key":"b","cost":%d}]}`, searchCost))
	}
	if r := batch(25); r.Status != 200 || r.json(t)["allowed"] != true {
		t.Fatalf("first batch: %d %s", r.Status, r.Body)
	}
	r := batch(10) // search has 5 left: denied; api must not be spent
	if r.Status != 429 || r.json(t)["allowed"] != false || r.Header.Get("Retry-After") == "" {
		t.Fatalf("over-budget batch: %d %s, want 429 with Retry-After", r.Status, r.Body)
	}
	if !strings.Contains(r.Header.Get("RateLimit"), `"search"`) {
		t.Errorf("RateLimit = %q, want the denying policy's figures", r.Header.Get("RateLimit"))
	}
	peek := c.do(t, 0, "POST", "/limits/check", `{"checks":[{"policy":"api","key":"b","cost":0},{"policy":"search","key":"b","cost":0}]}`)
	ds := peek.json(t)["decisions"].([]any)
	if got := ds[0].(map[string]any)["remaining"]; got != float64(40) {
		t.Errorf("api remaining after the denied batch = %v, want 40 (not spent)", got)
	}
	if got := ds[1].(map[string]any)["remaining"]; got != float64(5) {
		t.Errorf("search remaining after the denied batch = %v, want 5 (the denied hit refunded)", got)
	}
}

func TestBatchIsOneRoundTrip(t *testing.T) {
	c := realCluster(t, 1, limitPolicies())
	h := &redistest.RoundTrips{}
	c.instances[0].rdb.AddHook(h)
	checks := make([]string, 0, guard.MaxBatch)
	for i := range guard.MaxBatch {
		pol := []string{"api", "search"}[i%2]
		checks = append(checks, fmt.Sprintf(`{"policy":%q,"key":"k%d"}`, pol, i))
	}
	// Warm the connection and the script cache first (serve loads the
	// scripts at start-up).
	c.do(t, 0, "POST", "/limits/check", `{"checks":[{"policy":"api","key":"warm"},{"policy":"search","key":"warm"}]}`)
	h.Reset()
	r := c.do(t, 0, "POST", "/limits/check", `{"checks":[`+strings.Join(checks, ",")+`]}`)
	if r.Status != 200 {
		t.Fatalf("batch: %d %s", r.Status, r.Body)
	}
	if got := h.N(); got != 1 {
		t.Fatalf("a batch of %d checks took %d round trips, want 1", guard.MaxBatch, got)
	}

	// Denied is one round trip too, a single check or a batch denied
	// whole: a denied check writes nothing, so nothing is refunded. Only
	// a batch that is partly allowed refunds (a second round trip).
	c.do(t, 0, "POST", "/limits/check", `{"policy":"search","key":"full","cost":30}`)
	// A first refund loads its script (serve preloads it).
	c.do(t, 0, "POST", "/limits/check", `{"checks":[{"policy":"search","key":"warm2"},{"policy":"search","key":"full"}]}`)
	for _, tc := range []struct {
		name, body string
		status     int
		rt         int64
	}{
		{"denied check", `{"policy":"search","key":"full"}`, 429, 1},
		{"batch denied whole", `{"checks":[{"policy":"search","key":"full"},{"policy":"search","key":"full","cost":2}]}`, 429, 1},
		{"batch partly allowed", `{"checks":[{"policy":"search","key":"fresh"},{"policy":"search","key":"full"}]}`, 429, 1},
	} {
		h.Reset()
		if r := c.do(t, 0, "POST", "/limits/check", tc.body); r.Status != tc.status || h.N() != tc.rt {
			t.Errorf("%s: %d in %d round trips, want %d in %d", tc.name, r.Status, h.N(), tc.status, tc.rt)
		}
	}
}

func TestShadowPolicyAllowsAndReports(t *testing.T) {
	c := realCluster(t, 1, limitPolicies())
	c.do(t, 0, "POST", "/limits/check", `{"policy":"shadow","key":"s"}`)
	r := c.do(t, 0, "POST", "/limits/check", `{"policy":"shadow","key":"s"}`)
	d := r.json(t)["decisions"].([]any)[0].(map[string]any)
	if r.Status != 200 || d["allowed"] != true || d["shadow"] != true || d["would_allow"] != false {
		t.Fatalf("shadow over its limit: %d %s, want 200 allowed, shadow, would_allow false", r.Status, r.Body)
	}
}

func TestBadLimitInput(t *testing.T) {
	c, _ := miniCluster(t, 1, limitPolicies())
	long := strings.Repeat("k", guard.MaxKeyLength+1)
	many := strings.TrimSuffix(strings.Repeat(`{"policy":"api","key":"k"},`, guard.MaxBatch+1), ",")
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"unknown policy", `{"policy":"nope","key":"k"}`, 404, "unknown_policy"},
		{"missing policy", `{"key":"k"}`, 400, "invalid_request"},
		{"empty key", `{"policy":"api","key":""}`, 422, "invalid_key"},
		{"oversized key", `{"policy":"api","key":"` + long + `"}`, 422, "invalid_key"},
		{"brace in key", `{"policy":"api","key":"a{b}"}`, 422, "invalid_key"},
		{"negative cost", `{"policy":"api","key":"k","cost":-1}`, 422, "invalid_cost"},
		{"cost above capacity", `{"policy":"api","key":"k","cost":51}`, 422, "invalid_cost"},
		{"huge cost", `{"policy":"api","key":"k","cost":1e30}`, 422, "invalid_cost"},
		{"cost beyond int64", `{"policy":"api","key":"k","cost":99999999999999999999}`, 422, "invalid_cost"},
		{"fractional cost", `{"policy":"api","key":"k","cost":1.5}`, 422, "invalid_cost"},
		{"cost as string", `{"policy":"api","key":"k","cost":"1"}`, 422, "invalid_cost"},
		{"bad cost in a batch", `{"checks":[{"policy":"api","key":"k"},{"policy":"api","key":"k","cost":[1]}]}`, 422, "invalid_cost"},
		{"key as number", `{"policy":"api","key":5}`, 400, "invalid_request"},
		{"oversized batch", `{"checks":[` + many + `]}`, 400, "invalid_request"},
		{"empty batch", `{"checks":[]}`, 400, "invalid_request"},
		{"both forms", `{"policy":"api","key":"k","checks":[{"policy":"api","key":"k"}]}`, 400, "invalid_request"},
		{"malformed JSON", `{"policy":`, 400, "invalid_request"},
		{"unknown field", `{"policy":"api","key":"k","burst":3}`, 400, "invalid_request"},
		{"array body", `[1,2]`, 400, "invalid_request"},
		{"empty body", ``, 400, "invalid_request"},
		{"two objects", `{"policy":"api","key":"k"}{}`, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, 0, "POST", "/limits/check", tc.body)
			if r.Status != tc.status || r.json(t)["code"] != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, tc.status, tc.code)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
			// The reason names the field as the caller wrote it.
			if detail, _ := r.json(t)["detail"].(string); strings.Contains(detail, "checkItem") {
				t.Errorf("detail %q names a Go type", detail)
			}
		})
	}
	r := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":5}`)
	if detail, _ := r.json(t)["detail"].(string); !strings.Contains(detail, `"key" must be a string`) {
		t.Errorf("key as number: detail %q, want it to say \"key\" must be a string", detail)
	}
}
