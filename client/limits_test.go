package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/limit"
)

// limitPolicies are the policies of the limit tests: windows and a
// bucket that nothing in a test run refills.
func limitPolicies() map[string]limit.Policy {
	return map[string]limit.Policy{
		"window": {Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour, OnStoreError: limit.FallbackOpen},
		"bucket": {Algorithm: limit.TokenBucket, Capacity: 4, RefillPerSecond: 0.001, OnStoreError: limit.FallbackOpen},
		"other":  {Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour, OnStoreError: limit.FallbackOpen},
	}
}

func TestCheckAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, limitPolicies())
	c := newClient(t, g.URL)
	ctx := context.Background()

	for i := range 3 {
		res, err := c.Check(ctx, client.Check{Policy: "window", Key: "user:1"})
		if err != nil || !res.Allowed || res.FromMemory {
			t.Fatalf("check %d = %+v, %v; want allowed by otpguard", i+1, res, err)
		}
		d := res.Decisions[0]
		if d.Mode != client.ModeExact || d.Limit != 3 || d.Remaining != int64(2-i) {
			t.Errorf("check %d: decision %+v, want exact, limit 3, remaining %d", i+1, d, 2-i)
		}
		if res.RateLimitPolicy != `"window";q=3;w=3600` {
			t.Errorf("RateLimitPolicy = %q", res.RateLimitPolicy)
		}
	}
	res, err := c.Check(ctx, client.Check{Policy: "window", Key: "user:1"})
	if err != nil || res.Allowed || res.FromMemory || res.RetryAfter <= 59*time.Minute {
		t.Fatalf("4th check = %+v, %v; want denied by otpguard for about an hour", res, err)
	}
	hits := g.hitsOn("/limits/check")

	// Denied again from memory, for the same and a higher cost: no request.
	for _, cost := range []int64{1, 1, 2, 3} {
		res, err := c.Check(ctx, client.Check{Policy: "window", Key: "user:1", Cost: cost})
		if err != nil || res.Allowed || !res.FromMemory {
			t.Fatalf("cost %d after the denial = %+v, %v; want denied from memory", cost, res, err)
		}
		d := res.Decisions[0]
		if d.Mode != client.ModeClientMemory || d.Limit != 3 || d.Remaining != 0 || d.RetryAfter <= 59*time.Minute {
			t.Errorf("memory decision %+v", d)
		}
		if res.RateLimitPolicy != `"window";q=3;w=3600` || res.RateLimit == "" {
			t.Errorf("memory headers %q / %q", res.RateLimitPolicy, res.RateLimit)
		}
	}
	if n := g.hitsOn("/limits/check"); n != hits {
		t.Errorf("denials from memory made %d requests, want 0", n-hits)
	}
	// A peek is asked of otpguard; another key too.
	if res, err := c.Check(ctx, client.Check{Policy: "window", Key: "user:1", Peek: true}); err != nil || res.FromMemory {
		t.Errorf("peek = %+v, %v; want asked of otpguard", res, err)
	}
	if res, err := c.Check(ctx, client.Check{Policy: "window", Key: "user:2"}); err != nil || !res.Allowed {
		t.Errorf("another key = %+v, %v; want allowed", res, err)
	}
	if n := g.hitsOn("/limits/check"); n != hits+2 {
		t.Errorf("peek and another key made %d requests, want 2", n-hits)
	}
}

func TestCheckLowerCostAsksOTPGuard(t *testing.T) {
	g := startOTPGuard(t, limitPolicies())
	c := newClient(t, g.URL)
	ctx := context.Background()

	// The bucket of 4: spend 3, then 2 is denied (1 token left).
	if res, err := c.Check(ctx, client.Check{Policy: "bucket", Key: "k", Cost: 3}); err != nil || !res.Allowed {
		t.Fatalf("cost 3 = %+v, %v", res, err)
	}
	if res, err := c.Check(ctx, client.Check{Policy: "bucket", Key: "k", Cost: 2}); err != nil || res.Allowed || res.FromMemory {
		t.Fatalf("cost 2 = %+v, %v; want denied by otpguard", res, err)
	}
	hits := g.hitsOn("/limits/check")
	// Cost 2 and more: from memory. Cost 1: asked, and allowed.
	if res, _ := c.Check(ctx, client.Check{Policy: "bucket", Key: "k", Cost: 4}); res.Allowed || !res.FromMemory {
		t.Errorf("cost 4 = %+v; want denied from memory", res)
	}
	res, err := c.Check(ctx, client.Check{Policy: "bucket", Key: "k", Cost: 1})
	if err != nil || !res.Allowed || res.FromMemory {
		t.Errorf("cost 1 = %+v, %v; want allowed by otpguard (a lower cost is never answered from memory)", res, err)
	}
	if n := g.hitsOn("/limits/check"); n != hits+1 {
		t.Errorf("requests: %d, want 1 (cost 1 only)", n-hits)
	}
}

func TestCheckBatchAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, limitPolicies())
	c := newClient(t, g.URL)
	ctx := context.Background()

	batch := []client.Check{{Policy: "other", Key: "ip:203.0.113.7"}, {Policy: "window", Key: "user:9", Cost: 2}}
	res, err := c.CheckBatch(ctx, batch...)
	if err != nil || !res.Allowed || len(res.Decisions) != 2 {
		t.Fatalf("first batch = %+v, %v", res, err)
	}
	// window has 1 left: the batch is denied and spends nothing.
	res, err = c.CheckBatch(ctx, batch...)
	if err != nil || res.Allowed || res.FromMemory || res.Denying().Policy != "window" {
		t.Fatalf("second batch = %+v, %v; want denied by window", res, err)
	}
	if res.Decisions[0].Remaining != 98 || !res.Decisions[0].Allowed {
		t.Errorf("other's decision %+v, want allowed with 98 left", res.Decisions[0])
	}
	hits := g.hitsOn("/limits/check")
	res, err = c.CheckBatch(ctx, batch...)
	if err != nil || res.Allowed || !res.FromMemory {
		t.Fatalf("third batch = %+v, %v; want denied from memory", res, err)
	}
	if res.Decisions[0].Mode != client.ModeSkipped || res.Decisions[1].Mode != client.ModeClientMemory {
		t.Errorf("modes %q, %q; want skipped, client_memory", res.Decisions[0].Mode, res.Decisions[1].Mode)
	}
	if g.hitsOn("/limits/check") != hits {
		t.Error("a batch denied from memory made a request")
	}
	// Only the first batch spent: other still has 99.
	res, err = c.Check(ctx, client.Check{Policy: "other", Key: "ip:203.0.113.7", Peek: true})
	if err != nil || res.Decisions[0].Remaining != 99 {
		t.Errorf("other after the denied batches: %+v, %v; want 99 left", res, err)
	}
}
