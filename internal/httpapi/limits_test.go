package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func limitPolicies() guard.Policies {
	p := defaults()
	p.Limits = map[string]limit.Policy{
		"api":    {Algorithm: limit.TokenBucket, Capacity: 50, RefillPerSecond: 0.01},
		"search": {Algorithm: limit.FixedWindow, Limit: 30, Window: time.Minute},
		"fast":   {Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 20},
		"shadow": {Algorithm: limit.TokenBucket, Capacity: 1, RefillPerSecond: 0.01, Shadow: true},
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
	// Empty it: a machine slow enough for a token to come back meanwhile
	// (one per 50ms) just takes it too; a bucket that never empties does
	// not pass.
	r := check(0)
	for takes := 6; r.Status == 200; takes++ {
		if takes == 50 {
			t.Fatalf("%d takes of a bucket of 5 at 20 tokens/s: all allowed, want a 429", takes)
		}
		r = check(takes % 2)
	}
	if r.Status != 429 {
		t.Fatalf("take of an empty bucket: %d, want 429", r.Status)
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
	checks := make([]string, 0, limit.MaxBatch)
	for i := range limit.MaxBatch {
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
		t.Fatalf("a batch of %d checks took %d round trips, want 1", limit.MaxBatch, got)
	}

	// Denied is one round trip too, a single check or a batch, denied whole
	// or partly allowed: a denied check writes nothing, and the checks of a
	// batch on one Redis are decided in one script that spends nothing when
	// one denies, so nothing is refunded (a partly allowed batch took 2
	// round trips, the second to refund, before). Once denied, a key is
	// answered from this instance's memory until its window resets: 0 round
	// trips (mode memory).
	for _, k := range []string{"full1", "full2", "full3"} {
		c.do(t, 0, "POST", "/limits/check", fmt.Sprintf(`{"policy":"search","key":%q,"cost":30}`, k))
	}
	for _, tc := range []struct {
		name, body string
		status     int
		rt         int64
		modes      []string
	}{
		{"denied check", `{"policy":"search","key":"full1"}`, 429, 1, []string{"exact"}},
		{"batch denied whole", `{"checks":[{"policy":"search","key":"full2"},{"policy":"search","key":"full3","cost":2}]}`, 429, 1, []string{"exact", "exact"}},
		{"batch partly allowed", `{"checks":[{"policy":"search","key":"fresh"},{"policy":"api","key":"fresh2","cost":50},{"policy":"api","key":"fresh2"}]}`, 429, 1, []string{"exact", "exact", "exact"}},
		{"denied check again", `{"policy":"search","key":"full1"}`, 429, 0, []string{"memory"}},
		{"batch denied again, from memory", `{"checks":[{"policy":"search","key":"full2"},{"policy":"search","key":"full3","cost":2}]}`, 429, 0, []string{"memory", "memory"}},
		{"batch with a remembered denial", `{"checks":[{"policy":"search","key":"fresh"},{"policy":"search","key":"full1"}]}`, 429, 1, []string{"exact", "memory"}},
	} {
		h.Reset()
		r := c.do(t, 0, "POST", "/limits/check", tc.body)
		if r.Status != tc.status || h.N() != tc.rt {
			t.Errorf("%s: %d in %d round trips, want %d in %d", tc.name, r.Status, h.N(), tc.status, tc.rt)
		}
		if tc.modes != nil {
			var got []string
			for _, d := range r.json(t)["decisions"].([]any) {
				got = append(got, d.(map[string]any)["mode"].(string))
			}
			if strings.Join(got, ",") != strings.Join(tc.modes, ",") {
				t.Errorf("%s: modes %v, want %v", tc.name, got, tc.modes)
			}
		}
	}
	// Nothing of the denied batches was spent.
	peek := c.do(t, 0, "POST", "/limits/check", `{"checks":[{"policy":"search","key":"fresh","cost":0},{"policy":"api","key":"fresh2","cost":0}]}`)
	ds := peek.json(t)["decisions"].([]any)
	if ds[0].(map[string]any)["remaining"] != float64(30) || ds[1].(map[string]any)["remaining"] != float64(50) {
		t.Errorf("after the denied batches: %s, want search fresh 30 and api fresh2 50 left", peek.Body)
	}
}

// TestHammeredDeniedKeyCostsNoRoundTrip: under attack most requests repeat
// a key already denied. Each instance asks Redis once, then answers from
// memory until the window resets, and says so in the metrics.
func TestHammeredDeniedKeyCostsNoRoundTrip(t *testing.T) {
	const instances = 2
	c := realCluster(t, instances, limitPolicies())
	hooks := make([]*redistest.RoundTrips, instances)
	for i := range hooks {
		hooks[i] = &redistest.RoundTrips{}
		c.instances[i].rdb.AddHook(hooks[i])
	}
	allowed := 0
	for n := range 200 {
		r := c.do(t, n%instances, "POST", "/limits/check", `{"policy":"search","key":"attacked"}`)
		if r.Status == 200 {
			allowed++
		}
	}
	if allowed != 30 {
		t.Errorf("%d of 200 allowed, want exactly the limit, 30", allowed)
	}
	for i, h := range hooks {
		// Its share of the 30 allowed, plus one denial each.
		if h.N() > 31 {
			t.Errorf("instance %d: %d round trips for 100 checks, want at most 31 (the rest from memory)", i, h.N())
		}
	}
	m := c.do(t, 0, "GET", "/metrics", "")
	if !strings.Contains(string(m.Body), `otpguard_decisions_from_memory_total{policy="search"}`) {
		t.Errorf("metrics do not count decisions from memory")
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
	long := strings.Repeat("k", limit.MaxKeyLength+1)
	many := strings.TrimSuffix(strings.Repeat(`{"policy":"api","key":"k"},`, limit.MaxBatch+1), ",")
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
