package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// testClock is a driven clock, safe for concurrent reads.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// challengePolicy refuses a country's second untrusted send in an hour
// (the velocity rule, floor 1) and lets solvedCap solved sends through.
func challengePolicy(solvedCap int64) guard.Policies {
	p := guard.DefaultPolicies() // challenges on: proof of work
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Floor = 1
	p.OTP.Challenge.Floor = solvedCap
	return p
}

// challengeCluster starts two instances on a driven clock, on a real
// Redis or (onCluster) a Redis Cluster.
func challengeCluster(t *testing.T, onCluster bool, p guard.Policies, tune func(*config.Config)) (*cluster, *testClock) {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 1, 1, 10, 1, 0, 0, time.UTC)}
	var cfg *config.Config
	if onCluster {
		rc := redistest.SharedCluster(t)
		cfg = testConfig(t, "", redistest.Prefix(), t.TempDir(), p)
		cfg.Redis.Mode, cfg.Redis.Addrs = store.RedisCluster, rc.Addrs()
	} else {
		tg := redistest.New(t)
		cfg = testConfig(t, tg.URL, tg.Prefix, t.TempDir(), p)
	}
	tune(cfg)
	return newClusterConfig(t, 2, cfg, app.WithClock(clock.Now)), clock
}

// challengeOf reads a 428's problem and its challenge.
func challengeOf(t *testing.T, r response) httpx.Challenge {
	t.Helper()
	if r.Status != http.StatusPreconditionRequired {
		t.Fatalf("status %d (%s), want 428", r.Status, r.Body)
	}
	var p httpx.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil || p.Code != "challenge_required" || p.Challenge == nil {
		t.Fatalf("body %s: want challenge_required with a challenge (%v)", r.Body, err)
	}
	return *p.Challenge
}

// solve computes the proof of work as a client would.
func solve(t *testing.T, c httpx.Challenge) string {
	t.Helper()
	s := challenge.Solve(guard.Challenge{Type: guard.ChallengeType(c.Type), Algorithm: c.Algorithm, Challenge: c.Challenge,
		Salt: c.Salt, MaxNumber: c.MaxNumber, Signature: c.Signature})
	if s == "" {
		t.Fatalf("no solution to %+v", c)
	}
	return s
}

// holdToSpec holds a real POST /otp/send and its answer to api/openapi.yaml.
func holdToSpec(t *testing.T, body string, res response) {
	t.Helper()
	router, err := gorillamux.NewRouter(loadSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/otp/send", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: bearerAuthentication, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Errorf("the request does not match the spec: %v", err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.Status, Header: res.Header, Options: opts}
	out.SetBodyBytes(res.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("the response does not match the spec: %v\nbody: %s", err, res.Body)
	}
	checkUndocumented(t, fmt.Sprintf("POST /otp/send -> %d", res.Status), route, res)
}

func sendWith(phone, solution string) string {
	return fmt.Sprintf(`{"phone":%q,"challenge":%q}`, phone, solution)
}

func TestChallengeRoundTrip(t *testing.T) { challengeRoundTrip(t, false) }

func TestChallengeRoundTripOnRedisCluster(t *testing.T) { challengeRoundTrip(t, true) }

// challengeRoundTrip: an automatic refusal is a 428; its solution lets the
// send through once, on either instance, for its own number only, before
// it expires, and only with its signature.
func challengeRoundTrip(t *testing.T, onCluster bool) {
	c, clock := challengeCluster(t, onCluster, challengePolicy(10), func(*config.Config) {})
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400100001"}`); r.Status != http.StatusOK {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	r428 := c.do(t, 1, "POST", "/otp/send", `{"phone":"+447400100002"}`)
	holdToSpec(t, `{"phone":"+447400100002"}`, r428)
	ch := challengeOf(t, r428)
	if ch.Type != "pow" || ch.Algorithm != "SHA-256" || ch.MaxNumber != guard.DefaultChallengeMaxNumber || !strings.Contains(ch.Salt, "expires=") {
		t.Fatalf("challenge %+v: want ALTCHA's fields", ch)
	}
	sol := solve(t, ch)
	r := c.do(t, 0, "POST", "/otp/send", sendWith("+447400100002", sol))
	if r.Status != http.StatusOK {
		t.Fatalf("solved send: %d %s", r.Status, r.Body)
	}
	holdToSpec(t, sendWith("+447400100002", sol), r)
	if got := c.out.SentTo("+447400100002"); got != 1 {
		t.Fatalf("SMS to the solved number: got %d, want 1", got)
	}
	cases := []struct {
		name, phone string
		solution    func() string
	}{
		{"used again on the other instance", "+447400100002", func() string { return sol }},
		{"another number's", "+447400100003", func() string { return sol }},
		{"bad signature", "+447400100004", func() string {
			s := solve(t, challengeOf(t, c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400100004"}`)))
			var pl challenge.Payload
			raw, _ := base64.StdEncoding.DecodeString(s)
			_ = json.Unmarshal(raw, &pl)
			pl.Signature = strings.Repeat("0", 64)
			b, _ := json.Marshal(pl)
			return base64.StdEncoding.EncodeToString(b)
		}},
		{"expired", "+447400100005", func() string {
			s := solve(t, challengeOf(t, c.do(t, 1, "POST", "/otp/send", `{"phone":"+447400100005"}`)))
			clock.Add(guard.DefaultChallengeExpires + time.Second)
			return s
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.out.Count()
			r := c.do(t, 1, "POST", "/otp/send", sendWith(tc.phone, tc.solution()))
			challengeOf(t, r) // refused with a new challenge
			if got := c.out.Count(); got != before {
				t.Fatalf("SMS sent: %d more, want none", got-before)
			}
		})
	}
	// A refusal no challenge lifts stays a refusal: the number's own limit
	// (per_phone: 3 in 10 minutes), spent by solved sends.
	for range 3 {
		ch := challengeOf(t, c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400100006"}`))
		if r := c.do(t, 1, "POST", "/otp/send", sendWith("+447400100006", solve(t, ch))); r.Status != http.StatusOK {
			t.Fatalf("solved send: %d %s", r.Status, r.Body)
		}
	}
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400100006"}`); problemCode(t, r) != "phone_rate_limited" {
		t.Fatalf("a fourth send: %d %s, want 429 phone_rate_limited", r.Status, r.Body)
	}
}

// TestSolvedCapIsExact: many solved sends at once, across two instances,
// get exactly the solved cap; the rest are refused unusual_volume.
func TestSolvedCapIsExact(t *testing.T) {
	const solvedCap, tries = 5, 24
	c, _ := challengeCluster(t, false, challengePolicy(solvedCap), func(*config.Config) {})
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400200000"}`); r.Status != http.StatusOK {
		t.Fatalf("first send: %d %s", r.Status, r.Body)
	}
	bodies := make([]string, tries)
	for i := range tries {
		phone := fmt.Sprintf("+4474002%05d", i+1)
		bodies[i] = sendWith(phone, solve(t, challengeOf(t, c.do(t, i, "POST", "/otp/send", fmt.Sprintf(`{"phone":%q}`, phone)))))
	}
	var ok, capped atomic.Int64
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() {
			r := c.do(t, i, "POST", "/otp/send", bodies[i])
			switch code := problemCode(t, r); code {
			case "":
				ok.Add(1)
			case "unusual_volume":
				capped.Add(1)
			default:
				t.Errorf("send %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if ok.Load() != solvedCap || capped.Load() != tries-solvedCap {
		t.Fatalf("solved sends: %d sent, %d capped; want %d and %d", ok.Load(), capped.Load(), solvedCap, tries-solvedCap)
	}
}
