package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
)

// The keys the simulated clients use.
const (
	apiKey = "simulate-api-key-0123456789abcdef"
	opsKey = "simulate-ops-key-0123456789abcdef"
)

// clock is the virtual time every instance reads (app.WithClock).
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// redisTick is how far the virtual clock moves before the embedded
// Redis's TTLs follow (its TIME follows at once): a move walks and sorts
// every key, which with tens of thousands of keys costs milliseconds, so
// TTLs move in steps rather than at every request. Fixed windows end at
// most this late: a cooldown of 30s lasts 30 to 45s, a window of 10m at
// most 10m15s. The rules of the service's clock (velocity, conversion)
// are exact.
const redisTick = 15 * time.Second

// outbox is the SMS provider: it keeps the last code sent to each number,
// which the simulated user reads and types.
type outbox struct {
	mu    sync.Mutex
	codes map[string]string
}

var codeRE = regexp.MustCompile(`[0-9]{4,}`)

// Send keeps the code of m.
func (o *outbox) Send(_ context.Context, m guard.Message) error {
	all := codeRE.FindAllString(m.Body, -1)
	if len(all) == 0 {
		return fmt.Errorf("simulate: no code in the message")
	}
	o.mu.Lock()
	o.codes[m.To] = all[len(all)-1]
	o.mu.Unlock()
	return nil
}

func (o *outbox) code(phone string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.codes[phone]
}

// deployment is the service under simulation: instances built by app.New
// as the binary builds them (from OTPGUARD_* settings), sharing one
// embedded Redis and one SQLite ops database, on the virtual clock.
type deployment struct {
	clock     *clock
	redis     *miniredis.Miniredis
	redisAt   time.Time // where the embedded Redis's TTLs were last moved to
	instances []*app.App
	out       *outbox
	// risk is the network's fake Lookup, and captcha the fake CAPTCHA
	// provider, that every instance asks.
	risk    *riskNetwork
	captcha *captchaProvider
	next    int // the instance the next request goes to
	closers []func()
}

// newDeployment starts n instances with the policy file policy ("" for
// the defaults) and services (tenants.go), the clock set to at.
func newDeployment(ctx context.Context, n int, policy string, services []string, at time.Time) (_ *deployment, err error) {
	d := &deployment{clock: &clock{}, out: &outbox{codes: map[string]string{}}}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.clock.Set(at)
	d.risk = newRiskNetwork(d.clock.Now)
	if d.captcha, err = newCaptchaProvider(); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, d.captcha.Close)
	d.redis = miniredis.NewMiniRedis()
	if err := d.redis.Start(); err != nil {
		return nil, fmt.Errorf("simulate: embedded redis: %w", err)
	}
	d.closers = append(d.closers, d.redis.Close)
	d.redis.SetTime(at)
	d.redisAt = at
	// The ops database is thrown away after the run: in memory when the
	// system has a tmpfs at /dev/shm, where its commits wait on no disk.
	dir, err := os.MkdirTemp("/dev/shm", "otpguard-simulate-")
	if err != nil {
		dir, err = os.MkdirTemp("", "otpguard-simulate-")
	}
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { os.RemoveAll(dir) })
	env := map[string]string{
		"OTPGUARD_REDIS_URL": "redis://" + d.redis.Addr(),
		"OTPGUARD_CONFIG":    policy,
		"OTPGUARD_API_KEYS":  apiKey,
		"OTPGUARD_OPS_KEYS":  opsKey,
		"OTPGUARD_HMAC_KEY":  "simulate-hmac-key-0123456789abcdef",
		"OTPGUARD_DATA_DIR":  dir,
		"OTPGUARD_LOG_LEVEL": "error",
		"OTPGUARD_INSTANCES": strconv.Itoa(n),
		"OTPGUARD_ADDR":      "127.0.0.1:0",
		"OTPGUARD_SMS":       "console", // replaced by the outbox
		// The whatsapp channel on, to the outbox too, for a policy's
		// otp.fallback_channel; a scenario without one never names it.
		"TWILIO_WHATSAPP_FROM":        "+14155550111",
		"TWILIO_WHATSAPP_CONTENT_SID": "HX0123456789abcdef0123456789abcdef",
		// A generous budget: the simulation measures the policy, not the
		// latency of a busy machine, which must not pass for an outage (the
		// timeout, the most the setting allows) or an overload (the
		// ceiling). 5 s for both was met under -race at load 24, and a
		// request answered 503 changed the report.
		"OTPGUARD_REDIS_TIMEOUT":    "10s",
		"OTPGUARD_REDIS_MAX_WAIT":   "1m",
		"OTPGUARD_DENYLIST_REFRESH": "1m", // refreshed on the virtual clock instead (refreshDeny)
		// The fake CAPTCHA provider, for a policy of otp.challenge.type
		// captcha (a policy of another type never asks it); the longest
		// timeout, for the reason above.
		"OTPGUARD_CAPTCHA_VERIFY_URL": d.captcha.verifyURL(),
		"OTPGUARD_CAPTCHA_SECRET":     captchaSecret,
		"OTPGUARD_CAPTCHA_SITE_KEY":   captchaSiteKey,
		"OTPGUARD_CAPTCHA_HOSTNAMES":  captchaHost,
		"OTPGUARD_CAPTCHA_TIMEOUT":    "10s",
	}
	for range n {
		cfg, err := config.Load(func(k string) string { return env[k] })
		if err != nil {
			return nil, fmt.Errorf("simulate: %w", err)
		}
		if err := withServices(&cfg.Policies, services, dir); err != nil {
			return nil, err
		}
		// Handed over: start-up's version check asks INFO server, which
		// the embedded Redis does not answer.
		rdb, err := store.NewRedisClient(store.RedisOptions{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout})
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, func() { rdb.Close() })
		a, err := app.New(ctx, cfg, app.WithRedis(rdb), app.WithSender(d.out), app.WithClock(d.clock.Now), app.WithOutput(io.Discard),
			app.WithRiskLookup(d.risk))
		if err != nil {
			return nil, fmt.Errorf("simulate: instance: %w", err)
		}
		d.closers = append(d.closers, func() { a.Close() })
		d.instances = append(d.instances, a)
	}
	return d, nil
}

// Close stops the instances and the embedded Redis, last started first.
func (d *deployment) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// advance moves the virtual clock to t (never back), the embedded
// Redis's TIME with it, and its TTLs in steps of redisTick.
func (d *deployment) advance(t time.Time) {
	if t.Before(d.clock.Now()) {
		return
	}
	d.clock.Set(t)
	d.redis.SetTime(t)
	if step := t.Sub(d.redisAt); step >= redisTick {
		d.redis.FastForward(step)
		d.redisAt = t
	}
}

// refreshDeny reloads every instance's deny-list, as each does every
// OTPGUARD_DENYLIST_REFRESH in production: called on the virtual clock,
// so that an automatic block reaches the other instances as it would.
func (d *deployment) refreshDeny(ctx context.Context) {
	for _, a := range d.instances {
		_ = a.DenyCache().Reload(ctx) // a failure keeps the last list, as in production
	}
}

// answer is what a request got back.
type answer struct {
	status  int
	problem problem
}

// problem is the part of a problem+json body the simulator reads.
type problem struct {
	Code      string     `json:"code"`
	Challenge *challenge `json:"challenge,omitempty"`
	Fallback  *fallback  `json:"fallback,omitempty"`
}

// do sends one JSON request with the key to the next instance (serve).
func (d *deployment) do(ctx context.Context, method, path, key string, body any) answer {
	b, err := json.Marshal(body)
	if err != nil {
		return answer{status: 0, problem: problem{Code: "simulator_error"}}
	}
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	rec := d.serve(ctx, req)
	ans := answer{status: rec.Code}
	if rec.Code != http.StatusOK {
		_ = json.Unmarshal(rec.Body.Bytes(), &ans.problem)
		if ans.problem.Code == "" {
			ans.problem.Code = "http_" + strconv.Itoa(rec.Code)
		}
	}
	return ans
}

// serve hands req to the next instance (round robin) through its
// handler, and waits until that instance's conversion watch has judged
// it, so that a run is the same every time.
func (d *deployment) serve(ctx context.Context, req *http.Request) *httptest.ResponseRecorder {
	a := d.instances[d.next%len(d.instances)]
	d.next++
	req.RemoteAddr = "127.0.0.1:1"
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	_ = a.FlushWatch(ctx)
	return rec
}
