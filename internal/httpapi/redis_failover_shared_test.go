package httpapi_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestMasterDeathCostsOnlyItsOwnKeys kills the master that holds the
// country's shared keys (the velocity rule's and the trust marks' slot,
// {GB}, of every number sent to; the numbers' own keys, prefixes and
// addresses are on the live masters) under a steady mix of sends and checks
// from two instances, with the velocity rule and the conversion watch off
// (the configuration that refused most sends before): no send to a number
// whose own keys are on a live master is refused 5xx, every limit on a live
// master stays exact (twice the limit bounds the dead master's keys: its
// unreplicated writes may be lost), /readyz answers 200 throughout and
// names the dead master, the dead master's slots are exact again within
// about a second of requests after the promotion (counted, not timed), the
// shared rule decided from memory is counted, and no breaker of the dead
// master is left once the slot map no longer names it.
func TestMasterDeathCostsOnlyItsOwnKeys(t *testing.T) {
	const lim, perPhone, pace = 40, 3, 15 * time.Millisecond
	rc := redistest.StartCluster(t)
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone = guard.Window{Limit: perPhone, Window: time.Hour}
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.OTP.Conversion.Mode = guard.ConversionOff
	p.Limits = map[string]limit.Policy{
		"api": {Algorithm: limit.FixedWindow, Limit: lim, Window: time.Hour, OnStoreError: limit.FallbackClosed},
	}
	cfg := testConfig(t, "", redistest.Prefix(), t.TempDir(), p)
	cfg.Redis.Mode, cfg.Redis.Addrs = store.RedisCluster, rc.Addrs()
	cfg.RedisTimeout = 500 * time.Millisecond // a killed node refuses at once; exactness needs no 10 ms budget
	cfg.RedisMaxWait = 0
	c := newClusterConfig(t, 2, cfg)
	cc := c.instances[0].rdb.(*redis.ClusterClient)

	victim := masterOf(t, cc, "{GB}") // the country's slot: velocity counts, trust marks
	keys := limitKeysOnMasters(t, cc, 3)
	slices.SortFunc(keys, func(a, b string) int { // the victim's key first
		return boolInt(masterOf(t, cc, store.LimitHashTag(b, store.DefaultLimitShards)) == victim) -
			boolInt(masterOf(t, cc, store.LimitHashTag(a, store.DefaultLimitShards)) == victim)
	})
	live, ips := ownKeysOff(t, cc, victim, p.OTP, 40)
	replica := replicaOf(t, cc, victim)

	var (
		stop, promoted         atomic.Bool
		liveSends, liveRefused atomic.Int64
		deadAfter              atomic.Int64 // checks on the dead key refused after the promotion, before it answered
		recovered              atomic.Bool
		allowed                sync.Map // key or number -> *atomic.Int64
	)
	count := func(k string) *atomic.Int64 {
		v, _ := allowed.LoadOrStore(k, new(atomic.Int64))
		return v.(*atomic.Int64)
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { // checks, one key per master
			for i := 0; !stop.Load(); i++ {
				k := keys[i%len(keys)]
				r := c.do(t, w, "POST", "/limits/check", fmt.Sprintf(`{"policy":"api","key":%q}`, k))
				switch {
				case r.Status == 200:
					count(k).Add(1)
				case r.Status != 429 && k != keys[0]:
					t.Errorf("check on a live master (%s): status %d", k, r.Status)
				}
				if k == keys[0] && promoted.Load() && !recovered.Load() {
					if r.Status == 200 || r.Status == 429 {
						recovered.Store(true)
					} else {
						deadAfter.Add(1)
					}
				}
				time.Sleep(pace)
			}
		})
		wg.Go(func() { // sends to numbers on live masters
			for i := 0; !stop.Load(); i++ {
				phone := live[(i*2+w)%len(live)]
				r := c.do(t, w, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":%q}`, phone, ips[i%len(ips)]))
				liveSends.Add(1)
				switch {
				case r.Status == 200:
					count(phone).Add(1)
				case r.Status >= 500:
					liveRefused.Add(1)
					t.Errorf("send to %s (own keys on a live master): status %d at %s: %s", phone, r.Status, time.Now().Format("15:04:05.000"), r.Body)
				}
				time.Sleep(pace)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("kill %s (holds {GB}; the check key %s)", victim, keys[0])
	if !rc.KillNode(victim) {
		t.Fatalf("master %s is not a node of the cluster", victim)
	}
	watch, watching := newNodeWatch(t, victim), make(chan struct{})
	var notReady, namedDown atomic.Int64
	var sampler sync.WaitGroup
	sampler.Go(func() { // /ops/status and /readyz until the promotion
		for i := 0; ; i++ {
			select {
			case <-watching:
				return
			default:
			}
			watch.sample(t, c, i)
			r := c.do(t, i, "GET", "/readyz", "")
			var body struct{ Down []string }
			_ = json.Unmarshal(r.Body, &body)
			if r.Status != 200 {
				notReady.Add(1)
				t.Errorf("/readyz on instance %d with one master dead: %d %s", i%2, r.Status, r.Body)
			}
			if slices.Contains(body.Down, victim) {
				namedDown.Add(1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	at := waitPromoted(t, replica, 15*time.Second)
	close(watching)
	sampler.Wait()
	promoted.Store(true)
	for deadline := time.Now().Add(5 * time.Second); !recovered.Load() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("promoted %s at %s; %d sends to live-master numbers (%d refused 5xx); %d checks on the dead key refused after the promotion",
		replica, at.Format("15:04:05.000"), liveSends.Load(), liveRefused.Load(), deadAfter.Load())
	watch.check(t)

	sent := int64(0)
	for _, phone := range live {
		sent += count(phone).Load()
	}
	if sent == 0 {
		t.Fatal("no send to a live-master number was answered 200: the test sent nothing")
	}
	if !recovered.Load() {
		t.Fatalf("the dead master's slots did not answer after the promotion of %s", replica)
	}
	// About a second of checks: each worker checks the dead key every
	// third request, a request at least pace apart.
	if max := int64(2 * time.Second / (3 * pace)); deadAfter.Load() > max {
		t.Errorf("%d checks on the dead master's key refused after the promotion, want at most %d (about 1 s of them)", deadAfter.Load(), max)
	}
	if namedDown.Load() == 0 {
		t.Errorf("/readyz never named the dead master %s in down", victim)
	}
	for i, k := range keys {
		bound := int64(lim)
		if i == 0 {
			bound = 2 * lim
		}
		if got := count(k).Load(); got > bound {
			t.Errorf("key %s allowed %d checks, over its bound %d", k, got, bound)
		}
	}
	for _, phone := range live {
		if got := count(phone).Load(); got > perPhone {
			t.Errorf("%s (keys on a live master) was sent %d codes, over its limit %d", phone, got, perPhone)
		}
	}
	staleBreakerGone(t, c, victim)
}

// staleBreakerGone: once the slot map no longer names victim, no instance
// reports a breaker for it (in /ops/status, /readyz) and none reports a
// breaker not closed in otpguard_redis_breaker_state. A few probe rounds
// are waited for, no more.
func staleBreakerGone(t *testing.T, c *cluster, victim string) {
	t.Helper()
	gauge := regexp.MustCompile(`(?m)^otpguard_redis_breaker_state (\S+)$`)
	var last string
	stale := true
	for deadline := time.Now().Add(3 * time.Second); stale && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		stale = false
		for i := range c.instances {
			st := c.doKey(t, i, "GET", "/ops/status", "", opsKey)
			rz := c.do(t, i, "GET", "/readyz", "")
			m := gauge.FindStringSubmatch(string(c.do(t, i, "GET", "/metrics", "").Body))
			if strings.Contains(string(st.Body), `"`+victim+`"`) || strings.Contains(string(rz.Body), `"`+victim+`"`) || m == nil || m[1] != "0" {
				stale, last = true, fmt.Sprintf("instance %d: /ops/status %s\n/readyz %d %s\nbreaker gauge %v", i, st.Body, rz.Status, rz.Body, m)
			}
		}
	}
	if stale {
		t.Errorf("a breaker of the dead master %s (or one not closed) is still reported after its replica's promotion:\n%s", victim, last)
	}
	var fell bool
	for i := range c.instances {
		if strings.Contains(string(c.do(t, i, "GET", "/metrics", "").Body), `otpguard_shared_fallback_decisions_total{rule="otp:tr"}`) {
			fell = true
		}
	}
	if !fell {
		t.Error("no instance counted the trust mark's rule decided from memory (otpguard_shared_fallback_decisions_total)")
	}
}

// ownKeysOff returns n numbers none of whose own keys (the number's, its
// prefixes') is on victim, and addresses whose per-IP key is not either:
// a send to them meets the dead master only through its country's keys.
func ownKeysOff(t *testing.T, cc *redis.ClusterClient, victim string, p guard.OTPPolicy, n int) (numbers, ips []string) {
	t.Helper()
	depths := []int{p.PerPrefix.DigitsDropped}
	for _, d := range p.PrefixDepths {
		depths = append(depths, d.DigitsDropped)
	}
	off := func(tag string) bool { return masterOf(t, cc, "{"+tag+"}") != victim }
	for _, r := range []string{"+4479111", "+4478111", "+4477111", "+4475111", "+4474111"} {
		for i := 0; len(numbers) < n && i < 2000; i++ {
			phone := fmt.Sprintf("%s%05d", r, i)
			ok := off(phone)
			for _, d := range depths {
				ok = ok && off(guard.Prefix(phone, d))
			}
			if ok {
				numbers = append(numbers, phone)
			}
		}
	}
	for i := 1; len(ips) < 50 && i < 255; i++ {
		if ip := fmt.Sprintf("198.51.100.%d", i); off(ip) {
			ips = append(ips, ip)
		}
	}
	if len(numbers) < n || len(ips) == 0 {
		t.Fatalf("found %d numbers and %d addresses off %s, want %d and some", len(numbers), len(ips), victim, n)
	}
	return numbers, ips
}
