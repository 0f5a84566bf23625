package client

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func denied(mode string, retryMs int64) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", `"p";q=10;w=1`)
		w.Header().Set("RateLimit", `"p";r=0;t=1`)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprintf(w, `{"allowed":false,"decisions":[{"policy":"p","key":"k","mode":%q,"allowed":false,"limit":10,"remaining":0,"retry_after_ms":%d,"reset_after_ms":%d}]}`,
			mode, retryMs, retryMs)
	}
}

func allowedAnswer(mode string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"allowed":true,"decisions":[{"policy":"p","key":"k","mode":%q,"allowed":true,"limit":10,"remaining":3,"retry_after_ms":0,"reset_after_ms":500}]}`, mode)
	}
}

func TestMemoryHoldsUntilRetry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	f := newFakeServer(t, denied("exact", 300), allowedAnswer("exact"))
	c, _ := testClient(t, f, WithClock(clk.Now))
	ctx := context.Background()
	check := Check{Policy: "p", Key: "k"}

	if res, _ := c.Check(ctx, check); res.Allowed || res.FromMemory {
		t.Fatalf("first: %+v, want denied by the server", res)
	}
	// Remembered until sent + 300 ms - 1 ms (the server rounds up).
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 298 * time.Millisecond} {
		clk.t = time.Unix(1000, 0).Add(at)
		res, err := c.Check(ctx, check)
		if err != nil || res.Allowed || !res.FromMemory {
			t.Fatalf("at +%v: %+v, %v; want denied from memory", at, res, err)
		}
		if want := 300*time.Millisecond - at; res.RetryAfter != want {
			t.Errorf("at +%v: RetryAfter %v, want %v", at, res.RetryAfter, want)
		}
		if res.RateLimitPolicy != `"p";q=10;w=1` || res.RateLimit != `"p";r=0;t=1` {
			t.Errorf("at +%v: headers %q %q", at, res.RateLimitPolicy, res.RateLimit)
		}
	}
	if f.hits.Load() != 1 {
		t.Fatalf("requests: %d, want 1", f.hits.Load())
	}
	clk.t = time.Unix(1000, 0).Add(299 * time.Millisecond)
	if res, _ := c.Check(ctx, check); !res.Allowed || res.FromMemory {
		t.Errorf("at +299ms: %+v, want asked of the server", res)
	}
	if f.hits.Load() != 2 || c.memory.len() != 0 {
		t.Errorf("requests %d, remembered %d: want 2, 0", f.hits.Load(), c.memory.len())
	}
}

func TestMemoryRemembersOnlyExactDenials(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		retryMs int64
		want    int
	}{
		{"exact", 500, 1}, {"memory", 500, 1}, {"fallback", 500, 0}, {"sync", 500, 0}, {"exact", 0, 0},
	} {
		t.Run(fmt.Sprintf("%s/%d", tt.mode, tt.retryMs), func(t *testing.T) {
			f := newFakeServer(t, denied(tt.mode, tt.retryMs))
			c, _ := testClient(t, f)
			if _, err := c.Check(context.Background(), Check{Policy: "p", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			if got := c.memory.len(); got != tt.want {
				t.Errorf("remembered %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMemoryClearedWhenRedisFails(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"a fallback decision": allowedAnswer("fallback"),
		"store_unavailable":   status(503, "60", `{"code":"store_unavailable","status":503}`),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeServer(t, denied("exact", 60_000), h)
			c, _ := testClient(t, f, WithRetries(0, 0))
			ctx := context.Background()
			_, _ = c.Check(ctx, Check{Policy: "p", Key: "k"})
			_, _ = c.Check(ctx, Check{Policy: "p", Key: "other"})
			if c.memory.len() != 0 {
				t.Errorf("remembered %d after %s, want 0", c.memory.len(), name)
			}
		})
	}
}

func TestMemoryBounded(t *testing.T) {
	m := newMemory(3)
	now := time.Unix(0, 0)
	for i := range 5 {
		m.put("p", fmt.Sprint(i), denial{cost: 1, until: now.Add(time.Hour)})
	}
	if m.len() != 3 {
		t.Fatalf("len %d, want 3", m.len())
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok := m.get("p", fmt.Sprint(i), 1, now); ok != want {
			t.Errorf("key %d remembered: %v, want %v (least recently used forgotten first)", i, ok, want)
		}
	}
	// Costs: the remembered cost and above only; a peek never.
	m.put("p", "c", denial{cost: 3, until: now.Add(time.Hour)})
	for cost, want := range map[int64]bool{0: false, 1: false, 2: false, 3: true, 9: true} {
		if _, ok := m.get("p", "c", cost, now); ok != want {
			t.Errorf("cost %d covered: %v, want %v", cost, ok, want)
		}
	}
}

func TestMemoryOff(t *testing.T) {
	f := newFakeServer(t, denied("exact", 60_000))
	c, _ := testClient(t, f, WithDenialMemory(0))
	for range 3 {
		_, _ = c.Check(context.Background(), Check{Policy: "p", Key: "k"})
	}
	if f.hits.Load() != 3 {
		t.Errorf("requests %d, want 3 without memory", f.hits.Load())
	}
}

// TestMemoryRateLimitAgreesWithRetryAfter: a denial answered from memory
// writes the RateLimit field as otpguard writes it on a denial, t being
// the Retry-After (rounded up, at least 1), not the window's reset: a
// token bucket that needs 1 s for the next token but 10 s to be whole
// again says t=1 beside Retry-After: 1, not t=10.
func TestMemoryRateLimitAgreesWithRetryAfter(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	bucket := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", `"p";q=10;w=10`)
		w.Header().Set("RateLimit", `"p";r=0;t=1`)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"allowed":false,"decisions":[{"policy":"p","key":"k","mode":"exact","allowed":false,"limit":10,"remaining":0,"retry_after_ms":1000,"reset_after_ms":10000}]}`)
	}
	f := newFakeServer(t, bucket)
	c, _ := testClient(t, f, WithClock(clk.Now))
	ctx := context.Background()
	check := Check{Policy: "p", Key: "k"}
	if res, _ := c.Check(ctx, check); res.Allowed || res.FromMemory {
		t.Fatalf("first: %+v, want denied by the server", res)
	}
	for _, tc := range []struct {
		at   time.Duration
		want string
	}{{0, `"p";r=0;t=1`}, {400 * time.Millisecond, `"p";r=0;t=1`}, {998 * time.Millisecond, `"p";r=0;t=1`}} {
		clk.t = time.Unix(1000, 0).Add(tc.at)
		res, err := c.Check(ctx, check)
		if err != nil || !res.FromMemory {
			t.Fatalf("at +%v: %+v, %v; want denied from memory", tc.at, res, err)
		}
		if res.RateLimit != tc.want {
			t.Errorf("at +%v: RateLimit %q with RetryAfter %v, want %q", tc.at, res.RateLimit, res.RetryAfter, tc.want)
		}
	}
}
