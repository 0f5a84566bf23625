package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

func outagePolicies() guard.Policies {
	p := defaults()
	minute := time.Minute
	p.Limits = map[string]limit.Policy{
		"open-fw":   {Algorithm: limit.FixedWindow, Limit: 7, Window: minute, OnStoreError: limit.FallbackOpen},
		"local-fw":  {Algorithm: limit.FixedWindow, Limit: 100, Window: minute, OnStoreError: limit.FallbackLocal, LocalLimit: 2},
		"open-tb":   {Algorithm: limit.TokenBucket, Capacity: 10, RefillPerSecond: 0.001, OnStoreError: limit.FallbackOpen},
		"closed-fw": {Algorithm: limit.FixedWindow, Limit: 100, Window: minute, OnStoreError: limit.FallbackClosed},
	}
	return p
}

func checkBody(policy, key string) string {
	return fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key)
}

// decisionTrips is a go-redis hook that counts the round trips an
// instance makes to Redis for its decisions (its heartbeats, on the
// instance set, and connection set-up are left out).
type decisionTrips struct{ n atomic.Int64 }

func (h *decisionTrips) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "auth", "client", "select":
			continue
		case "ping": // the breaker's warm-up and the probe, never a decision
			return
		}
		for _, a := range c.Args() {
			if k, ok := a.(string); ok && strings.HasSuffix(k, "{instances}") {
				return
			}
		}
		h.n.Add(1)
		return
	}
}

func (h *decisionTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *decisionTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *decisionTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// hurtCluster is an outage cluster whose decisions are counted.
type hurtCluster struct {
	*outageCluster
	trips []*decisionTrips
}

func countTrips(oc *outageCluster) *hurtCluster {
	hc := &hurtCluster{outageCluster: oc}
	for _, in := range oc.instances {
		h := &decisionTrips{}
		in.rdb.AddHook(h)
		hc.trips = append(hc.trips, h)
	}
	return hc
}

// decide sends one request to instance i while Redis is hurt and checks
// that it waited on Redis at most once: a decision whose store call failed
// takes the fallback without asking again, and with the breaker open asks
// nothing. Each call is held to the timeout (store.TestRedisTimeoutHolds), so
// that is one timeout at most; how long it takes is measured by
// BenchmarkOutageDecision, not asserted here: a wall-clock bound fails on a
// busy machine, not on a broken fallback.
func (hc *hurtCluster) decide(t *testing.T, i int, path, body string) response {
	t.Helper()
	before := hc.trips[i].n.Load()
	r := hc.do(t, i, "POST", path, body)
	if n := hc.trips[i].n.Load() - before; n > 1 {
		t.Errorf("instance %d %s %s: %d round trips to a hurt Redis, want at most 1 (one timeout)", i, path, body, n)
	}
	return r
}

// TestOutageEveryPolicyKeepsItsMode hurts a real Redis four ways, with
// three instances that learned N = 3 from heartbeats (or were told it), and
// checks each policy does what its on_store_error says, each decision
// waiting on Redis at most once.
func TestOutageEveryPolicyKeepsItsMode(t *testing.T) {
	t.Parallel() // every outage cluster has its own redis-server and proxy
	faults := []struct {
		name string
		opts func(t *testing.T) outageOptions
		hurt func(oc *outageCluster)
	}{
		{name: "killed", hurt: func(oc *outageCluster) { oc.redis.Kill() }},
		{name: "refused", opts: func(t *testing.T) outageOptions {
			// Never reached Redis: N comes from OTPGUARD_INSTANCES.
			return outageOptions{URL: redistest.RefusedURL(t), Instances: 3}
		}},
		{name: "paused", hurt: func(oc *outageCluster) { oc.redis.Pause(30 * time.Second) }},
		{name: "black-holed", hurt: func(oc *outageCluster) { oc.proxy.BlackHole() }},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			var o outageOptions
			if f.opts != nil {
				o = f.opts(t)
			}
			oc := newOutageCluster(t, 3, outagePolicies(), o)
			oc.waitInstances(t, 3)
			if f.hurt != nil {
				f.hurt(oc)
			}
			hc := countTrips(oc)

			// Sequential, so each decision's round trips are its own.
			allowed := map[string]int{}
			for round := range 5 {
				for i := range oc.instances {
					for _, p := range []string{"open-fw", "local-fw", "open-tb", "closed-fw"} {
						r := hc.decide(t, i, "/limits/check", checkBody(p, "user:1"))
						switch {
						case p == "closed-fw":
							if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "60" ||
								r.json(t)["code"] != "store_unavailable" {
								t.Fatalf("round %d instance %d %s: got %d %s (Retry-After %q), want 503 store_unavailable, Retry-After 60",
									round, i, p, r.Status, r.Body, r.Header.Get("Retry-After"))
							}
						case r.Status == http.StatusOK:
							allowed[p]++
						case r.Status != http.StatusTooManyRequests:
							t.Fatalf("round %d instance %d %s: got %d %s, want 200 or 429", round, i, p, r.Status, r.Body)
						}
					}
				}
			}
			// Zero round trips proves something only if the breaker was
			// open: then the probe had found Redis dead before the first
			// decision, and no decision touched Redis at all.
			for i, tr := range hc.trips {
				if tr.n.Load() == 0 && oc.fbs[i].Status().Breaker == "closed" {
					t.Errorf("instance %d never tried Redis and its breaker is closed: the round-trip count proves nothing", i)
				}
			}
			want := map[string]int{
				"open-fw":  3 * (7 / 3), // the split limit: 2 per instance, 6 <= 7
				"local-fw": 3 * 2,       // N x local_limit
				"open-tb":  3 * (10 / 3),
			}
			for p, w := range want {
				if allowed[p] != w {
					t.Errorf("%s: %d allowed across 3 instances, want %d", p, allowed[p], w)
				}
			}

			// OTP is closed by default: refused, and no SMS leaves.
			for i := range oc.instances {
				r := hc.decide(t, i, "/otp/send", `{"phone":"+14155550100"}`)
				if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "60" {
					t.Errorf("instance %d: send got %d %s, want 503 with Retry-After 60", i, r.Status, r.Body)
				}
				r = hc.decide(t, i, "/otp/verify", `{"phone":"+14155550100","code":"123456"}`)
				if r.Status != http.StatusServiceUnavailable {
					t.Errorf("instance %d: verify got %d %s, want 503", i, r.Status, r.Body)
				}
			}
			if n := oc.out.Count(); n != 0 {
				t.Errorf("%d SMS sent while Redis was down with OTP closed, want 0", n)
			}
		})
	}
}

// TestOutageSplitLimitConcurrent fires concurrent requests for one key at
// every instance while Redis is down: the total allowed stays within the
// policy's limit (open) and N x local_limit (local).
func TestOutageSplitLimitConcurrent(t *testing.T) {
	t.Parallel()
	const n = 4
	p := outagePolicies()
	p.Limits["open-fw"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute, OnStoreError: limit.FallbackOpen}
	oc := newOutageCluster(t, n, p, outageOptions{})
	oc.waitInstances(t, n)
	oc.redis.Kill()

	var mu sync.Mutex
	allowed, statuses := map[string]int{}, map[int]int{}
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			for _, pol := range []string{"open-fw", "local-fw"} {
				r := oc.do(t, g%n, "POST", "/limits/check", checkBody(pol, "hot"))
				mu.Lock()
				statuses[r.Status]++
				if r.Status == http.StatusOK {
					allowed[pol]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := allowed["open-fw"]; got > 10 || got != n*(10/n) {
		t.Errorf("open: %d allowed, want at most the limit 10 (exactly %d)", got, n*(10/n))
	}
	if got := allowed["local-fw"]; got != n*2 {
		t.Errorf("local: %d allowed, want N x local_limit = %d", got, n*2)
	}
	for s := range statuses {
		if s != http.StatusOK && s != http.StatusTooManyRequests {
			t.Errorf("statuses %v: want only 200 and 429", statuses)
		}
	}
}

// TestOutageRedisRestartedEmpty kills Redis mid-run and starts it again
// empty: exact limits resume without a restart of otpguard, counters start
// over, callers see no error but the documented ones, no key lacks a TTL.
func TestOutageRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	const n = 2
	oc := newOutageCluster(t, n, outagePolicies(), outageOptions{
		Timeout: 2 * time.Second, // exactness: a slow round trip must not count as an outage
		Breaker: resilience.BreakerOptions{OpenFor: 200 * time.Millisecond},
	})
	oc.waitInstances(t, n)

	// fire sends m checks for key across the instances; only 200 and 429
	// (and 503 for the closed policy) may come back.
	fire := func(phase, policy, key string, m int) (ok int) {
		for j := range m {
			r := oc.do(t, j%n, "POST", "/limits/check", checkBody(policy, key))
			switch {
			case r.Status == http.StatusOK:
				ok++
			case r.Status == http.StatusTooManyRequests:
			case r.Status == http.StatusServiceUnavailable && policy == "closed-fw" && r.json(t)["code"] == "store_unavailable":
			default:
				t.Errorf("%s: %s got %d %s", phase, policy, r.Status, r.Body)
			}
		}
		return ok
	}

	if got := fire("healthy", "open-fw", "k", 10); got != 7 {
		t.Fatalf("healthy: %d allowed, want exactly the limit 7", got)
	}

	oc.redis.Kill()
	// Another key: "k" is denied from each instance's memory until its
	// window ends (no store call), and these decisions must reach the
	// fallback (and open the breakers).
	if got := fire("down", "open-fw", "k-down", 10); got > n*(7/n) {
		t.Errorf("down: %d allowed, want at most the split limit x N = %d", got, n*(7/n))
	}
	fire("down", "closed-fw", "k", 4)

	oc.redis.Restart()
	// Decisions go back to Redis once each instance's breaker closes; poke
	// with peeks at another key.
	oc.waitBreakers(t, "closed", func(i int) {
		oc.do(t, i, "POST", "/limits/check", `{"policy":"open-fw","key":"poke","cost":0}`)
	})
	for i, f := range oc.fbs {
		if got := f.Status().InFallback(); len(got) != 0 {
			t.Errorf("instance %d: still in fallback after recovery: %v", i, got)
		}
	}
	if got := fire("restarted", "open-fw", "k", 10); got != 7 {
		t.Errorf("after the restart: %d allowed, want the limit 7 again (counters start over)", got)
	}
	if got := fire("restarted", "closed-fw", "k", 3); got != 3 {
		t.Errorf("closed policy after the restart: %d allowed, want 3", got)
	}
	// OTP (closed) works again too.
	if r := oc.do(t, 0, "POST", "/otp/send", `{"phone":"+14155550107"}`); r.Status != http.StatusOK {
		t.Errorf("send after the restart: %d %s", r.Status, r.Body)
	}
	if r := oc.do(t, 1, "POST", "/otp/verify", fmt.Sprintf(`{"phone":"+14155550107","code":%q}`, oc.out.LastCode(t, "+14155550107"))); r.Status != http.StatusOK {
		t.Errorf("verify after the restart on another instance: %d %s", r.Status, r.Body)
	}
	if bad := oc.keysWithoutTTL(t); len(bad) > 0 {
		t.Errorf("keys without a TTL: %v", bad)
	}
}

// TestOutageOTPLocal: with on_store_error local, each instance sends at
// most local_limit codes per number while Redis is down, and a code sent by
// one instance verifies on another.
func TestOutageOTPLocal(t *testing.T) {
	t.Parallel()
	const n = 3
	p := outagePolicies()
	p.OTP.OnStoreError, p.OTP.LocalLimit, p.OTP.Cooldown = limit.FallbackLocal, 1, 0
	oc := newOutageCluster(t, n, p, outageOptions{Breaker: resilience.BreakerOptions{OpenFor: 200 * time.Millisecond}})
	oc.waitInstances(t, n)
	oc.proxy.BlackHole()
	hc := countTrips(oc)

	const phone = "+14155550108"
	for round := range 3 {
		for i := range n {
			r := hc.decide(t, i, "/otp/send", fmt.Sprintf(`{"phone":%q,"client_ip":"203.0.113.5"}`, phone))
			want := http.StatusTooManyRequests
			if round == 0 {
				want = http.StatusOK
			}
			if r.Status != want {
				t.Fatalf("round %d instance %d: send got %d %s, want %d", round, i, r.Status, r.Body, want)
			}
		}
	}
	if got := oc.out.Count(); got != n {
		t.Errorf("%d SMS sent, want N x local_limit = %d", got, n)
	}
	code := oc.out.LastCode(t, phone)
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	if r := hc.decide(t, 2, "/otp/verify", fmt.Sprintf(`{"phone":%q,"code":%q}`, phone, wrong)); r.Status != http.StatusBadRequest || r.json(t)["code"] != "wrong_code" {
		t.Errorf("wrong code: %d %s, want 400 wrong_code", r.Status, r.Body)
	}
	if r := hc.decide(t, 1, "/otp/verify", fmt.Sprintf(`{"phone":%q,"code":%q}`, phone, code)); r.Status != http.StatusOK {
		t.Fatalf("a code sent during the outage does not verify on another instance: %d %s", r.Status, r.Body)
	}
	if r := hc.decide(t, 1, "/otp/verify", fmt.Sprintf(`{"phone":%q,"code":%q}`, phone, code)); r.Status != http.StatusBadRequest {
		t.Errorf("the same code twice on one instance: %d %s, want 400", r.Status, r.Body)
	}

	// Redis back: stored codes and exact limits again.
	oc.proxy.Restore()
	oc.waitBreakers(t, "closed", func(i int) {
		oc.do(t, i, "POST", "/limits/check", `{"policy":"open-fw","key":"poke","cost":0}`)
	})
	// A round trip that a busy machine delays past the 10 ms timeout is
	// still decided by the fallback (a code kept on one instance only), and
	// the instance notes the store failure: such a try proves nothing and
	// is made again with another number. One that fails with no store
	// failure noted fails the test.
	for try := 0; ; try++ {
		other := fmt.Sprintf("+1415555%04d", 109+try)
		failed0, failed2 := oc.fbs[0].LastFailure(), oc.fbs[2].LastFailure()
		send := oc.do(t, 0, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q}`, other))
		var verify response
		if send.Status == http.StatusOK {
			verify = oc.do(t, 2, "POST", "/otp/verify", fmt.Sprintf(`{"phone":%q,"code":%q}`, other, oc.out.LastCode(t, other)))
			if verify.Status == http.StatusOK {
				break
			}
		}
		fell := !oc.fbs[0].LastFailure().Equal(failed0) || !oc.fbs[2].LastFailure().Equal(failed2)
		if !fell || try == 4 {
			t.Fatalf("after recovery (try %d): send on instance 0 %d %s, verify on instance 2 %d %s; want both 200",
				try, send.Status, send.Body, verify.Status, verify.Body)
		}
	}
}

// TestOutageStatus checks GET /readyz and GET /ops/status through an
// outage and back, and holds their answers to api/openapi.yaml.
func TestOutageStatus(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	oc := newOutageCluster(t, n, outagePolicies(), outageOptions{Breaker: resilience.BreakerOptions{OpenFor: 200 * time.Millisecond}})
	oc.waitInstances(t, n)

	get := func(path, key string) (response, map[string]any) {
		t.Helper()
		r := oc.doKey(t, 0, "GET", path, "", key)
		req := httptest.NewRequest("GET", path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("GET %s: not in the spec: %v", path, err)
		}
		opts := &openapi3filter.Options{AuthenticationFunc: bearerAuthentication, IncludeResponseStatus: true, MultiError: true}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
		out.SetBodyBytes(r.Body)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("GET %s -> %d: the response does not match the spec: %v\nbody: %s", path, r.Status, err, r.Body)
		}
		checkUndocumented(t, "GET "+path, route, r)
		var m map[string]any
		_ = json.Unmarshal(r.Body, &m)
		return r, m
	}
	inFallback := func(m map[string]any) []string {
		var out []string
		for _, v := range m["in_fallback"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}

	// settle retries a check of a healthy Redis until it passes, and fails
	// with what its last try found after 10s: with the 10 ms timeout, a ping
	// or a heartbeat that a busy machine delays past it rightly reads as
	// Redis down for a moment. A status that never says up fails.
	settle := func(what string, check func() string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			problem := check()
			if problem == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %s", what, problem)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	settle("healthy /ops/status", func() string {
		r, m := get("/ops/status", opsKey)
		if r.Status != http.StatusOK || m["redis"] != "up" || m["breaker"] != "closed" || m["instances"] != float64(n) || m["instances_from"] != "heartbeat" ||
			len(m["policies"].([]any)) != 6 || len(inFallback(m)) != 0 { // four limits, otp, and ops.signin (this request's key went through it)
			return fmt.Sprintf("%d %s", r.Status, r.Body)
		}
		return ""
	})
	settle("healthy /readyz", func() string {
		if r, m := get("/readyz", ""); r.Status != http.StatusOK || m["redis"] != "up" || m["instances"] != float64(n) {
			return fmt.Sprintf("%d %s", r.Status, r.Body)
		}
		return ""
	})
	if r, _ := get("/ops/status", apiKey); r.Status != http.StatusForbidden {
		t.Errorf("/ops/status with an API key: %d, want 403", r.Status)
	}
	if r, _ := get("/ops/status", ""); r.Status != http.StatusUnauthorized {
		t.Errorf("/ops/status without a key: %d, want 401", r.Status)
	}

	oc.proxy.BlackHole()
	oc.waitBreakers(t, "open", func(i int) {
		oc.do(t, i, "POST", "/limits/check", checkBody("open-fw", "x"))
		oc.do(t, i, "POST", "/limits/check", checkBody("closed-fw", "x"))
	})
	deadline := time.Now().Add(10 * time.Second)
	for oc.hbs[0].State().Up && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r, m := get("/ops/status", opsKey)
	if r.Status != http.StatusOK || m["redis"] != "down" || m["breaker"] == "closed" || m["instances"] != float64(n) {
		t.Errorf("outage /ops/status: %d %s", r.Status, r.Body)
	}
	if got := inFallback(m); !slices.Contains(got, "limits.open-fw") || !slices.Contains(got, "limits.closed-fw") {
		t.Errorf("outage in_fallback: %v, want limits.open-fw and limits.closed-fw", got)
	}
	r, m = get("/readyz", "")
	if fb, _ := m["in_fallback"].([]any); r.Status != http.StatusServiceUnavailable || m["code"] != "store_unavailable" ||
		m["redis"] != "down" || m["breaker"] == "closed" || m["instances"] != float64(n) || len(fb) == 0 {
		t.Errorf("outage /readyz: %d %s, want 503 store_unavailable saying the breaker, N and the policies in fallback", r.Status, r.Body)
	}

	oc.proxy.Restore()
	oc.waitRecovered(t, func(i int) {
		oc.do(t, i, "POST", "/limits/check", checkBody("open-fw", "x"))
		oc.do(t, i, "POST", "/limits/check", checkBody("closed-fw", "x"))
	})
	for !oc.hbs[0].State().Up && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(20 * time.Millisecond)
	}
	settle("recovered /ops/status", func() string {
		r, m := get("/ops/status", opsKey)
		if r.Status != http.StatusOK || m["redis"] != "up" || m["breaker"] != "closed" || len(inFallback(m)) != 0 ||
			!strings.Contains(string(r.Body), `"last_store_failure"`) {
			return fmt.Sprintf("%d %s; want up, closed, nothing in fallback, and the last store failure", r.Status, r.Body)
		}
		return ""
	})
	settle("recovered /readyz", func() string {
		if r, m := get("/readyz", ""); r.Status != http.StatusOK || m["breaker"] != "closed" {
			return fmt.Sprintf("%d %s", r.Status, r.Body)
		}
		return ""
	})
}
