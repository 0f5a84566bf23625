package httpapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestMasterFailoverOnRedisCluster kills one master of a real cluster (three
// masters, a replica each, cluster-node-timeout 1000) under load from two
// instances: checks and sends whose keys live on the live masters never
// fall back (no 503), the dead master's slots answer again after the
// replica's promotion (the time is logged, docs/scaling.md), and no key
// passes its bound: the limit on live masters, twice the limit on the
// dead one (every write it took may be lost to asynchronous replication).
func TestMasterFailoverOnRedisCluster(t *testing.T) {
	const lim = 40
	rc := redistest.StartCluster(t)
	p := defaults()
	p.OTP.Cooldown = 0
	p.Limits = map[string]limit.Policy{
		"api": {Algorithm: limit.FixedWindow, Limit: lim, Window: time.Hour, OnStoreError: limit.FallbackClosed},
	}
	cfg := testConfig(t, "", redistest.Prefix(), t.TempDir(), p)
	cfg.Redis.Mode, cfg.Redis.Addrs = store.RedisCluster, rc.Addrs()
	cfg.RedisTimeout = 500 * time.Millisecond // a killed node refuses at once; exactness needs no 10 ms budget
	cfg.RedisMaxWait = 0                      // the production ceiling for that timeout
	c := newClusterConfig(t, 2, cfg)
	cc := c.instances[0].rdb.(*redis.ClusterClient)

	keys := limitKeysOnMasters(t, cc, 3) // keys[0] on the master to kill
	victim := masterOf(t, cc, store.LimitHashTag(keys[0], store.DefaultLimitShards))
	dead := numbersOn(t, cc, victim, true, 40)
	live := numbersOn(t, cc, victim, false, 40)
	replica := replicaOf(t, cc, victim)

	var (
		stop                   atomic.Bool
		liveFell, deadAnswered atomic.Int64
		allowed                sync.Map // key -> *atomic.Int64
		sendsLive, sendsLive5  atomic.Int64
		unindexed              atomic.Int64
		recoveredAt            atomic.Int64 // first answer on the dead key after the promotion
		promotedAt             atomic.Int64
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
					liveFell.Add(1)
					t.Errorf("check on a live master (%s, %s): status %d at %s", k, masterOf(t, cc, store.LimitHashTag(k, store.DefaultLimitShards)), r.Status, time.Now().Format("15:04:05.000"))
				}
				if k == keys[0] && (r.Status == 200 || r.Status == 429) {
					deadAnswered.Add(1)
					if promotedAt.Load() != 0 {
						recoveredAt.CompareAndSwap(0, time.Now().UnixNano())
					}
				}
				time.Sleep(15 * time.Millisecond)
			}
		})
		wg.Go(func() { // sends, to numbers on live masters and on the victim
			for i := 0; !stop.Load(); i++ {
				phone := live[i%len(live)]
				if i%2 == 1 {
					phone = dead[i%len(dead)]
				}
				r := c.do(t, w, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":"198.51.100.%d"}`, phone, i%200))
				if i%2 == 0 {
					sendsLive.Add(1)
					switch {
					case r.Status >= 500:
						sendsLive5.Add(1)
						t.Errorf("send to %s on a live master: status %d at %s: %s", phone, r.Status, time.Now().Format("15:04:05.000"), r.Body)
					case r.Status == 200 && !strings.Contains(string(r.Body), `"verification_id"`):
						unindexed.Add(1) // its id's index was on the dead master
					}
				}
				time.Sleep(15 * time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	killedAt := time.Now()
	t.Logf("kill %s at %s; masters of keys %v", victim, killedAt.Format("15:04:05.000"), keys)
	if !rc.KillNode(victim) {
		t.Fatalf("master %s is not a node of the cluster", victim)
	}
	watch, watching := newNodeWatch(t, victim), make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() { // /ops/status and /readyz until the promotion
		for i := 0; ; i++ {
			select {
			case <-watching:
				return
			default:
			}
			watch.sample(t, c, i)
			time.Sleep(100 * time.Millisecond)
		}
	})
	promoted := waitPromoted(t, replica, 15*time.Second)
	close(watching)
	sampler.Wait()
	promotedAt.Store(promoted.UnixNano())
	deadline := time.Now().Add(5 * time.Second) // generous: the design promises 2 s
	for recoveredAt.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	rec := recoveredAt.Load()
	if rec == 0 {
		t.Fatalf("the dead master's slots did not answer within 5 s of the promotion of %s", replica)
	}
	t.Logf("promotion %v after the kill; dead master's slots exact again %v after the promotion; "+
		"%d sends to live-master numbers, %d of them 5xx, %d answered without a verification_id; live-master checks fallen back: %d",
		promoted.Sub(killedAt).Round(time.Millisecond), time.Unix(0, rec).Sub(promoted).Round(time.Millisecond),
		sendsLive.Load(), sendsLive5.Load(), unindexed.Load(), liveFell.Load())
	watch.check(t)
	for i, k := range keys {
		bound := int64(lim)
		if i == 0 {
			bound = 2 * lim
		}
		if got := count(k).Load(); got > bound {
			t.Errorf("key %s allowed %d checks, over its bound %d", k, got, bound)
		}
	}
}

// limitKeysOnMasters is n caller keys whose limits (the hashes of their
// shard) live on n different masters.
func limitKeysOnMasters(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var keys []string
	for i := 0; len(keys) < n && i < 1000; i++ {
		k := fmt.Sprintf("s%d", i)
		if m := masterOf(t, cc, store.LimitHashTag(k, store.DefaultLimitShards)); !seen[m] {
			seen[m] = true
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("found limits on %d masters, want %d", len(keys), n)
	}
	return keys
}

// masterOf is the address of the master that holds key.
func masterOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// numbersOn returns n UK mobile numbers whose keys live on master (on, or
// else on another master).
func numbersOn(t *testing.T, cc *redis.ClusterClient, master string, on bool, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 100000; i++ {
		phone := fmt.Sprintf("+4479111%05d", i)
		if (masterOf(t, cc, "{"+phone+"}") == master) == on {
			out = append(out, phone)
		}
	}
	return out
}

// replicaOf is the address of master's replica, from CLUSTER NODES.
func replicaOf(t *testing.T, cc *redis.ClusterClient, master string) string {
	t.Helper()
	nodes, err := cc.ClusterNodes(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // address -> node id
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		ids[strings.SplitN(f[1], "@", 2)[0]] = f[0]
		lines = append(lines, f)
	}
	for _, f := range lines {
		if strings.Contains(f[2], "slave") && f[3] == ids[master] {
			return strings.SplitN(f[1], "@", 2)[0]
		}
	}
	t.Fatalf("no replica of %s in CLUSTER NODES:\n%s", master, nodes)
	return ""
}

// waitPromoted polls addr until it says it is a master, and returns when.
func waitPromoted(t *testing.T, addr string, d time.Duration) time.Time {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if role, err := rc.Do(context.Background(), "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("replica %s not promoted within %s", addr, d)
	return time.Time{}
}
