package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// The formats one number arrives in: every one must build the same keys.
var formats = []string{"+91 98000 00000", "+919800000000", "+91-98000-00000", "+91 (98000) 00000"}

// burst fires n concurrent requests, spread round-robin over the cluster's
// instances, and counts the answers by status.
func burst(t *testing.T, c *cluster, n int, path string, body func(i int) string) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	codes := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := c.do(t, i, http.MethodPost, path, body(i))
			mu.Lock()
			statuses[r.Status]++
			if r.Status != http.StatusOK {
				codes[fmt.Sprint(r.json(t)["code"])]++
			}
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("refusals by code: %v", codes)
	return statuses
}

func TestOTPSendBurstIsExact(t *testing.T) {
	t.Parallel() // its own Redis (or key prefix) and outbox
	otpSendBurstIsExact(t, realCluster)
}

// otpSendBurstIsExact runs the exactness cases on instances that start
// gives (one Redis here; a Redis Cluster in redis_cluster_test.go).
func otpSendBurstIsExact(t *testing.T, start func(*testing.T, int, guard.Policies) *cluster) {
	const instances, requests = 4, 300
	cases := []struct {
		name     string
		policies func(*guard.Policies)
		body     func(i int) string
		want     int // messages sent
		denial   int // requests refused with 429
	}{
		{
			name:     "per phone, number in mixed formats",
			policies: func(p *guard.Policies) { p.OTP.Cooldown = 0; p.OTP.PerPhone.Limit = 3 },
			body: func(i int) string {
				return fmt.Sprintf(`{"phone":%q,"client_ip":"198.51.100.%d"}`, formats[i%len(formats)], i%250)
			},
			want: 3,
		},
		{
			name:     "cooldown",
			policies: func(p *guard.Policies) { p.OTP.Cooldown = time.Minute; p.OTP.PerPhone.Limit = 100 },
			body: func(i int) string {
				return fmt.Sprintf(`{"phone":%q}`, formats[i%len(formats)])
			},
			want: 1,
		},
		{
			name: "per IP across many numbers, IPv6 counted by /64",
			policies: func(p *guard.Policies) {
				p.OTP.Cooldown = 0
				p.OTP.PerIP = guard.Window{Limit: 7, Window: time.Hour}
				// The cold room is another rule: on Cluster a burst's
				// sends that the per-IP limit refuses hold their room
				// places until refunded, so the room may refuse in the
				// burst (guard's TestColdRoom* hold the room).
				p.OTP.CountryVelocity.ColdPerHour = 0
			},
			body: func(i int) string {
				// 300 numbers, one subscriber rotating through its /64
				return fmt.Sprintf(`{"phone":"+1415555%04d","client_ip":"2001:db8:1:2::%x"}`, i, i+1)
			},
			want: 7,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := defaults()
			tc.policies(&p)
			c := start(t, instances, p)
			statuses := burst(t, c, requests, "/otp/send", tc.body)
			if got := c.out.Count(); got != tc.want {
				t.Errorf("%d requests over %d instances sent %d messages, want exactly %d", requests, instances, got, tc.want)
			}
			if statuses[200] != tc.want || statuses[429] != requests-tc.want {
				t.Errorf("statuses = %v, want %d x 200 and %d x 429", statuses, tc.want, requests-tc.want)
			}
			t.Logf("%s: %d requests, %d instances, %d messages sent, statuses %v", tc.name, requests, instances, c.out.Count(), statuses)
		})
	}
}

// TestNaiveCounterLeaks shows that the race the store closes is real: the
// same burst against a GET-then-SET counter lets through more than its
// limit. (If this ever stops leaking, the exactness tests above prove less.)
func TestNaiveCounterLeaks(t *testing.T) {
	c := realCluster(t, 4, defaults())
	ctx := context.Background()
	const limit, requests = 3, 300
	key := c.prefix + "naive:{+919800000000}:sends"
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rdb := c.instances[i%len(c.instances)].rdb
			n, err := rdb.Get(ctx, key).Int64() // GET ...
			if err != nil && !strings.Contains(err.Error(), "nil") {
				t.Error(err)
				return
			}
			if n >= limit {
				return
			}
			time.Sleep(time.Millisecond)        // the work between the two calls
			rdb.Set(ctx, key, n+1, time.Minute) // ... then SET: the race
			allowed.Add(1)
		}()
	}
	close(start)
	wg.Wait()
	if allowed.Load() <= limit {
		t.Fatalf("naive counter allowed %d of %d, expected it to leak past %d", allowed.Load(), requests, limit)
	}
	t.Logf("naive GET-then-SET allowed %d sends against a limit of %d", allowed.Load(), limit)
}

func TestCountingRule(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone.Limit = 2
	p.OTP.PerIP.Limit = 1
	c := realCluster(t, 1, p)
	send := func(phone, ip string) response {
		return c.do(t, 0, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":%q}`, phone, ip))
	}
	if r := send("+14155550101", "203.0.113.1"); r.Status != 200 {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	// The IP is spent: this send is refused by it, and must not spend the
	// number's budget (2 sends), which is checked next from another IP.
	if r := send("+14155550102", "203.0.113.1"); r.Status != 429 || r.json(t)["code"] != "ip_rate_limited" {
		t.Fatalf("second send from the same IP: %d %s, want 429 ip_rate_limited", r.Status, r.Body)
	}
	for i, want := range []int{200, 200, 429} {
		r := send("+14155550102", fmt.Sprintf("203.0.113.%d", 10+i))
		if r.Status != want {
			t.Fatalf("send %d to the number refused by IP: %d %s, want %d", i+1, r.Status, r.Body, want)
		}
		if want == 429 {
			if got := r.json(t)["code"]; got != "phone_rate_limited" {
				t.Errorf("code = %v, want phone_rate_limited", got)
			}
			ra := r.Header.Get("Retry-After")
			if ra == "" || ra == "0" {
				t.Errorf("Retry-After = %q, want the window's remaining seconds", ra)
			}
		}
	}
}

func TestEveryKeyHasTTL(t *testing.T) {
	p := defaults()
	p.Limits = map[string]limit.Policy{
		"tb": {Algorithm: limit.TokenBucket, Capacity: 5, RefillPerSecond: 1},
		"fw": {Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute},
	}
	c := realCluster(t, 3, p)
	burst(t, c, 60, "/otp/send", func(i int) string {
		return fmt.Sprintf(`{"phone":"+1415555%04d","client_ip":"192.0.2.%d"}`, i%7, i%5)
	})
	burst(t, c, 60, "/otp/verify", func(i int) string {
		return fmt.Sprintf(`{"phone":"+1415555%04d","code":"000000"}`, i%7)
	})
	burst(t, c, 60, "/limits/check", func(i int) string {
		return fmt.Sprintf(`{"checks":[{"policy":"tb","key":"u%d"},{"policy":"fw","key":"u%d","cost":2}]}`, i%4, i%3)
	})
	ctx := context.Background()
	rdb := c.instances[0].rdb
	keys, err := rdb.Keys(ctx, c.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 10 {
		t.Fatalf("only %d keys written under %s*; the burst did not reach Redis", len(keys), c.prefix)
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 {
			t.Errorf("key %s has no TTL (PTTL %v)", k, ttl)
		}
	}
}
