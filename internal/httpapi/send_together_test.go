package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// An OTP send's limits go out together (guard's spend step, store.TakeSend):
// one MULTI on a single Redis, the denier keeps its attempt, everything
// else the request counted is refunded. These tests read the counters in
// Redis after the answers.

// sendCounters reads one send's counters in Redis: a missing key is 0.
type sendCounters struct {
	t      testing.TB
	rdb    redis.UniversalClient
	prefix string
	hour   int64
}

func (s sendCounters) get(key string) int64 {
	s.t.Helper()
	n, err := s.rdb.Get(context.Background(), s.prefix+key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		s.t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

func (s sendCounters) phone(e164 string) int64 { return s.get("otp:{" + e164 + "}:sends") }
func (s sendCounters) ip(ip string) int64      { return s.get("otp:ip:{" + ip + "}:sends") }
func (s sendCounters) prefixes(p string) int64 { return s.get("otp:prefix:{" + p + "}:sends") }
func (s sendCounters) budget() int64           { return s.get("otp:budget:{global}:hour") }

func (s sendCounters) velocity(region string) int64 {
	s.t.Helper()
	n, err := s.rdb.HGet(context.Background(), s.prefix+"otp:vel:{"+region+"}:h", fmt.Sprintf("s:%d", s.hour)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		s.t.Fatalf("HGET velocity %s: %v", region, err)
	}
	return n
}

// sendClusterAt starts n instances on a real Redis with the service clock
// frozen at now (the velocity rule's hour).
func sendClusterAt(t *testing.T, n int, p guard.Policies, now time.Time) (*cluster, sendCounters) {
	t.Helper()
	tg := redistest.New(t)
	c := newCluster(t, n, tg.URL, tg.Prefix, p, app.WithClock(func() time.Time { return now }))
	return c, sendCounters{t: t, rdb: c.instances[0].rdb, prefix: tg.Prefix, hour: now.Unix() / 3600}
}

func sendFrom(t *testing.T, c *cluster, i int, phone, ip string) (int, string) {
	t.Helper()
	r := c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":%q}`, phone, ip))
	if r.Status == http.StatusOK {
		return r.Status, ""
	}
	code, _ := r.json(t)["code"].(string)
	return r.Status, code
}

// TestDeniedSendSpendsNoOtherBudget: whichever limit refuses a send, every
// other counter in Redis is as if the send had never been asked for; the
// denier keeps its attempt (the budget gives its own back).
func TestDeniedSendSpendsNoOtherBudget(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 20, 0, 0, time.UTC)
	base := func() guard.Policies {
		p := defaults()
		p.OTP.Cooldown = 0
		p.OTP.Budget = guard.Budget{PerHour: 100}
		p.OTP.Conversion.Mode = guard.ConversionOff
		return p
	}
	const first, second = "+14155550101", "+14155550102" // one prefix, one country
	allPrefixes := []string{"+1415555", "+14155", "+1415"}

	t.Run("per number refuses", func(t *testing.T) {
		p := base()
		p.OTP.PerPhone.Limit = 1
		c, rc := sendClusterAt(t, 1, p, now)
		if st, code := sendFrom(t, c, 0, first, "203.0.113.1"); st != 200 {
			t.Fatalf("first send: %d %s", st, code)
		}
		if st, code := sendFrom(t, c, 0, first, "203.0.113.2"); st != 429 || code != string(problem.CodePhoneRateLimited) {
			t.Fatalf("second send: %d %s, want 429 phone_rate_limited", st, code)
		}
		if got := rc.phone(first); got != 2 {
			t.Errorf("number's counter %d, want 2 (the denier keeps its attempt)", got)
		}
		if got := rc.ip("203.0.113.2"); got != 0 {
			t.Errorf("refused send's address counter %d, want 0", got)
		}
		wantSharedCounters(t, rc, allPrefixes, 1)
	})

	t.Run("velocity rule refuses", func(t *testing.T) {
		p := base()
		p.OTP.CountryVelocity.Floor = 1
		c, rc := sendClusterAt(t, 1, p, now)
		if st, code := sendFrom(t, c, 0, first, "203.0.113.1"); st != 200 {
			t.Fatalf("first send: %d %s", st, code)
		}
		if st, code := sendFrom(t, c, 0, second, "203.0.113.2"); st != 429 || code != string(problem.CodeUnusualVolume) {
			t.Fatalf("second send: %d %s, want 429 unusual_volume", st, code)
		}
		if got := rc.phone(second); got != 0 {
			t.Errorf("refused number's counter %d, want 0", got)
		}
		if got := rc.ip("203.0.113.2"); got != 0 {
			t.Errorf("refused send's address counter %d, want 0", got)
		}
		wantSharedCounters(t, rc, allPrefixes, 1)
	})

	t.Run("budget refuses and gives its own hit back", func(t *testing.T) {
		p := base()
		p.OTP.Budget = guard.Budget{PerHour: 1}
		c, rc := sendClusterAt(t, 1, p, now)
		if st, code := sendFrom(t, c, 0, first, "203.0.113.1"); st != 200 {
			t.Fatalf("first send: %d %s", st, code)
		}
		if st, code := sendFrom(t, c, 0, second, "203.0.113.2"); st != http.StatusServiceUnavailable || code != string(problem.CodeBudgetExhausted) {
			t.Fatalf("second send: %d %s, want 503 budget_exhausted", st, code)
		}
		if got := rc.budget(); got != 1 {
			t.Errorf("budget %d, want 1 (its denied hit refunded)", got)
		}
		if got := rc.phone(second); got != 0 {
			t.Errorf("refused number's counter %d, want 0", got)
		}
		if got := rc.ip("203.0.113.2"); got != 0 {
			t.Errorf("refused send's address counter %d, want 0", got)
		}
		if got := rc.prefixes("+1415555"); got != 1 {
			t.Errorf("prefix counter %d, want 1", got)
		}
		if got := rc.velocity("US"); got != 1 {
			t.Errorf("velocity count %d, want 1", got)
		}
	})
}

// TestSendLimitsTogetherExactAcrossInstances: concurrent sends over three
// instances sharing one Redis, to 30 numbers of one prefix from 5
// addresses, with per-number, per-address, per-prefix, budget and velocity
// limits all in play. Whatever the interleaving, no limit lets through
// more than its limit, and when the refunds have settled every counter
// holds exactly the sends that left plus the attempts it refused itself
// (the denier keeps its attempt; the budget and the velocity rule hold
// sends only): a refused request spent no other limit's budget.
func TestSendLimitsTogetherExactAcrossInstances(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 20, 0, 0, time.UTC)
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone.Limit = 2
	p.OTP.PerIP = guard.Window{Limit: 9, Window: time.Hour}
	p.OTP.PerPrefix.Limit = 25
	p.OTP.Budget = guard.Budget{PerHour: 1000}
	p.OTP.CountryVelocity.Floor = 1000
	p.OTP.Conversion.Mode = guard.ConversionOff
	c, rc := sendClusterAt(t, 3, p, now)

	const requests, numbers, addrs = 150, 30, 5
	phone := func(i int) string { return fmt.Sprintf("+1415555%04d", i%numbers) }
	ip := func(i int) string { return fmt.Sprintf("198.51.100.%d", i%addrs) }
	type answer struct {
		status int
		code   string
	}
	answers := make([]answer, requests)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			st, code := sendFrom(t, c, i, phone(i), ip(i))
			answers[i] = answer{st, code}
		})
	}
	close(start)
	wg.Wait()

	sent := 0
	sentTo, sentFrom := map[string]int64{}, map[string]int64{}
	refusedBy := map[string]map[string]int64{} // code -> subject -> attempts kept
	for i, a := range answers {
		switch {
		case a.status == http.StatusOK:
			sent++
			sentTo[phone(i)]++
			sentFrom[ip(i)]++
		case a.status == http.StatusTooManyRequests:
			subject := map[string]string{string(problem.CodePhoneRateLimited): phone(i), string(problem.CodeIPRateLimited): ip(i)}[a.code]
			if refusedBy[a.code] == nil {
				refusedBy[a.code] = map[string]int64{}
			}
			refusedBy[a.code][subject]++
		default:
			t.Fatalf("request %d: %d %s", i, a.status, a.code)
		}
	}
	if got := c.out.Count(); got != sent {
		t.Errorf("%d messages for %d answers 200", got, sent)
	}
	if sent > 25 {
		t.Errorf("%d sent: more than the prefix's 25", sent)
	}
	for n, k := range sentTo {
		if k > 2 {
			t.Errorf("%s got %d codes, more than 2", n, k)
		}
	}
	for a, k := range sentFrom {
		if k > 9 {
			t.Errorf("%s sent %d codes, more than 9", a, k)
		}
	}
	for i := range numbers {
		n := phone(i)
		if got, want := rc.phone(n), sentTo[n]+refusedBy[string(problem.CodePhoneRateLimited)][n]; got != want {
			t.Errorf("%s counter %d, want %d (sent) + %d (refused by it)", n, got, sentTo[n], want-sentTo[n])
		}
	}
	for i := range addrs {
		a := ip(i)
		if got, want := rc.ip(a), sentFrom[a]+refusedBy[string(problem.CodeIPRateLimited)][a]; got != want {
			t.Errorf("%s counter %d, want %d (sent) + %d (refused by it)", a, got, sentFrom[a], want-sentFrom[a])
		}
	}
	if got, want := rc.prefixes("+1415555"), int64(sent)+refusedBy[string(problem.CodePrefixRateLimited)][""]; got != want {
		t.Errorf("prefix counter %d, want %d (sent) + %d (refused by it)", got, sent, want-int64(sent))
	}
	if got := rc.budget(); got != int64(sent) {
		t.Errorf("budget %d, want %d: the sends", got, sent)
	}
	if got := rc.velocity("US"); got != int64(sent) {
		t.Errorf("velocity count %d, want %d: the sends", got, sent)
	}
	t.Logf("%d requests over 3 instances: %d sent, refusals %v", requests, sent, refusedBy)
}

// wantSharedCounters checks the counters a number shares with others
// after a refusal: each prefix depth, the budget and the country velocity
// count hold want (the sends that left), none of the refused attempt.
func wantSharedCounters(t *testing.T, rc sendCounters, prefixes []string, want int64) {
	t.Helper()
	for _, pr := range prefixes {
		if got := rc.prefixes(pr); got != want {
			t.Errorf("prefix %s counter %d, want %d", pr, got, want)
		}
	}
	if got := rc.budget(); got != want {
		t.Errorf("budget %d, want %d", got, want)
	}
	if got := rc.velocity("US"); got != want {
		t.Errorf("velocity count %d, want %d", got, want)
	}
}
