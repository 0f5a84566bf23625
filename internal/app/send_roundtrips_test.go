package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// requestTrips counts the round trips on the service's shared Redis client
// (a pipeline or MULTI counts once) while counting is on, and the longest
// chain of them each begun after the one before it ended: the sequential
// ones, which the answer waits on one after the other. A round trip's
// place in the chain is one past the furthest of those that ended before
// it began, so a round trip sent beside the second (a give-back) cannot
// hide a third that follows the second, as counting those begun while
// none other was in flight would. Calls go through the coalescer and the
// fallback's workers, on contexts of their own, so it counts by time, not
// by context; the work that runs after the answer on its own goroutines
// (the conversion watch's batches, the abuse recorder's counts, the
// heartbeat) is told apart by its keys and left out. Each round trip is
// held for hold after Redis answered (200 ms: a busy machine can delay a
// goroutine by tens of milliseconds), so that round trips sent together
// overlap however the goroutines are scheduled. A round trip begun after
// the answer was flushed to the caller (answered) is counted apart, in
// after: the caller had its answer.
type requestTrips struct {
	hold time.Duration

	mu           sync.Mutex
	on, answered bool
	total, chain int
	ended        int // the furthest place in the chain of the round trips ended
	names, after []string
}

// start turns counting on from zero; stop turns it off and returns the
// counts.
func (h *requestTrips) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on, h.answered, h.total, h.chain, h.ended, h.names, h.after = true, false, 0, 0, 0, nil, nil
}

func (h *requestTrips) stop() (total, sequential int, names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on = false
	return h.total, h.chain, h.names
}

// answer marks the answer flushed to the caller.
func (h *requestTrips) answer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answered = true
}

// afterAnswer returns the round trips begun after the answer was flushed.
func (h *requestTrips) afterAnswer() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.after
}

// flushMark is a response recorder that tells trips when the answer is
// flushed: what the caller waits on ends there.
type flushMark struct {
	*httptest.ResponseRecorder
	trips *requestTrips
}

func (f flushMark) Flush() {
	f.trips.answer()
	f.ResponseRecorder.Flush()
}

// afterAnswer reports whether cmds are the work of the conversion watch,
// the abuse recorder or the heartbeat (by their keys), or a new
// connection's set-up.
func afterAnswer(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "auth", "client", "select", "multi", "exec":
			continue
		}
		bg := false
		for _, a := range c.Args() {
			if k, ok := a.(string); ok && (strings.Contains(k, ":conv:") || strings.Contains(k, ":ops:abuse:") || strings.Contains(k, "{instances}")) {
				bg = true
			}
		}
		if !bg {
			return false
		}
	}
	return true
}

func (h *requestTrips) around(cmds []redis.Cmder, run func() error) error {
	h.mu.Lock()
	counted := h.on && !afterAnswer(cmds)
	if counted && h.answered {
		var what []string
		for _, c := range cmds {
			what = append(what, c.Name())
		}
		h.after = append(h.after, strings.Join(what, "+"))
		counted = false
	}
	place := h.ended + 1
	if counted {
		h.total++
		h.chain = max(h.chain, place)
		var what []string
		for _, c := range cmds {
			what = append(what, c.Name())
		}
		h.names = append(h.names, fmt.Sprintf("%d:%s", place, strings.Join(what, "+")))
	}
	h.mu.Unlock()
	err := run()
	if counted {
		time.Sleep(h.hold)
		h.mu.Lock()
		h.ended = max(h.ended, place)
		h.mu.Unlock()
	}
	return err
}

func (h *requestTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *requestTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *requestTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(cmds, func() error { return next(ctx, cmds) })
	}
}

// TestSendRoundTripsHTTP: every kind of POST /otp/send, through the service
// as app.New builds it with its default defences (the deny-list, the
// destination rules, the prefix and country windows, the country velocity
// rule, the conversion watch, trust marks, challenges and the solved tier,
// the code's save, the block index, the audit queue), on a real Redis,
// waits on at most 2 sequential round trips on the shared client: a new
// number, a number the app says is an account's, a number marked trusted
// by its verify, a send the cooldown refuses, a send the velocity rule
// challenges, the challenged send again with its solution, the first
// velocity refusal of a country's hour, and a send with an
// Idempotency-Key (its claim rides in the limits' MULTI). The
// country velocity floor is 2 (so that the third number challenges) and
// the proof of work small; everything else is the default.
func TestSendRoundTripsHTTP(t *testing.T) {
	tg := redistest.New(t)
	env := map[string]string{
		"OTPGUARD_REDIS_URL": tg.URL, "OTPGUARD_REDIS_PREFIX": tg.Prefix, "OTPGUARD_API_KEYS": sendBenchKey,
		"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_DATA_DIR": t.TempDir(), "OTPGUARD_LOG_LEVEL": "warn",
		"OTPGUARD_REDIS_TIMEOUT": "5s",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := &cfg.Policies.OTP
	p.CountryVelocity.Floor, p.CountryVelocity.MinuteShare = 2, 0
	p.Challenge.MaxNumber = 1000
	cfg.Policies.FillDefaults()
	out := &guardtest.Outbox{}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard), app.WithSender(out))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	trips := &requestTrips{hold: 200 * time.Millisecond}
	a.Redis().AddHook(trips)
	h := a.Handler()
	post := func(path, body string, hdr ...string) (int, []byte) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		req.Header.Set("Authorization", "Bearer "+sendBenchKey)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(flushMark{w, trips}, req)
		return w.Code, w.Body.Bytes()
	}
	// sendWith posts a send with the headers hdr and holds it to at most
	// want sequential round trips.
	sendWith := func(name, body string, wantStatus, want int, hdr ...string) []byte {
		t.Helper()
		trips.start()
		status, resp := post("/otp/send", body, hdr...)
		if status != wantStatus {
			t.Fatalf("%s: %d %s, want %d", name, status, resp, wantStatus)
		}
		total, seq, names := trips.stop()
		t.Logf("%s: %d round trips, %d sequential: %v", name, total, seq, names)
		if seq > want {
			t.Errorf("%s: %d sequential round trips (%v), want at most %d", name, seq, names, want)
		}
		return resp
	}
	send := func(name, body string, wantStatus int) []byte {
		t.Helper()
		return sendWith(name, body, wantStatus, 2)
	}
	const known = "+447400123456"
	send("new number", `{"phone":"`+known+`","client_ip":"203.0.113.7"}`, http.StatusOK)
	send("the app's account", `{"phone":"+919800000001","client_ip":"203.0.113.7","account":true}`, http.StatusOK)
	// A refusal gives back what the send counted and notes the block, all
	// at once: the limits' refund, and the velocity refund with the note in
	// one pipeline.
	send("refused: the cooldown", `{"phone":"`+known+`","client_ip":"203.0.113.7"}`, http.StatusTooManyRequests)

	// The number verifies its code (which marks it trusted) and an operator
	// unblocks it, so the cooldown lets the next send through.
	if status, resp := post("/otp/verify", `{"phone":"`+known+`","code":"`+out.Code(known)+`"}`); status != http.StatusOK {
		t.Fatalf("verify: %d %s", status, resp)
	}
	if _, err := a.Ops().Unblock(context.Background(), known, "test"); err != nil {
		t.Fatal(err)
	}
	send("marked trusted by its verify", `{"phone":"`+known+`","client_ip":"203.0.113.7"}`, http.StatusOK)

	// New numbers until the velocity floor challenges one (the verify
	// above credited the hour, so how many pass first is the rule's
	// business, not this test's); each that passes waits on 2. The
	// country's first velocity refusal of the hour also raises the alert:
	// its claim goes out with the refunds and the country's entry in the
	// block index: 2.
	var body []byte
	var challenged string
	for i := 7; i < 40 && body == nil; i++ {
		phone := fmt.Sprintf("+4474001234%02d", i)
		trips.start()
		status, resp := post("/otp/send", `{"phone":"`+phone+`","client_ip":"203.0.113.9"}`)
		total, seq, names := trips.stop()
		t.Logf("new number %s: %d, %d round trips, %d sequential: %v", guard.MaskPhone(phone), status, total, seq, names)
		switch {
		case status == http.StatusOK && seq > 2:
			t.Errorf("new number: %d sequential round trips (%v), want at most 2", seq, names)
		case status == http.StatusPreconditionRequired:
			if seq > 2 {
				t.Errorf("challenged: the velocity floor, the hour's first: %d sequential round trips (%v), want at most 2", seq, names)
			}
			body, challenged = resp, phone
		case status != http.StatusOK:
			t.Fatalf("new number: %d %s", status, resp)
		}
	}
	if body == nil {
		t.Fatal("the velocity floor challenged none of 33 new numbers")
	}
	var problem struct {
		Challenge guard.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal(body, &problem); err != nil {
		t.Fatal(err)
	}
	c := problem.Challenge
	c.Type = guard.ChallengePoW
	sol := challenge.Solve(c)
	if sol == "" {
		t.Fatalf("no solution to %s", body)
	}
	send("the solved challenge's resend", `{"phone":"`+challenged+`","client_ip":"203.0.113.9","challenge":"`+sol+`"}`, http.StatusOK)
	send("challenged again: the velocity floor", `{"phone":"+447400123499","client_ip":"203.0.113.10"}`, http.StatusPreconditionRequired)
	// An Idempotency-Key's claim goes in the send's first round trip (the
	// limits' MULTI): 2, and its answer is stored after the answer left.
	// Its duplicate finds the claim there and gives back what it counted.
	idem := `{"phone":"+919800000002","client_ip":"203.0.113.7"}`
	first := sendWith("with an Idempotency-Key", idem, http.StatusOK, 2, "Idempotency-Key", "k-1")
	if after := trips.afterAnswer(); len(after) != 1 {
		t.Errorf("with an Idempotency-Key: %d round trips after the answer (%v), want 1: the answer's store", len(after), after)
	}
	if status, again := post("/otp/send", idem, "Idempotency-Key", "k-1"); status != http.StatusOK || string(again) != string(first) {
		t.Errorf("the same key again: %d %s, want the kept answer %s", status, again, first)
	}
	// The duplicate gave its counts back: a new key for the same number
	// meets the first send's cooldown only, and the number's window holds
	// the one send.
	if status, resp := post("/otp/send", idem, "Idempotency-Key", "k-2"); status != http.StatusTooManyRequests {
		t.Errorf("a new key: %d %s, want 429 (the cooldown)", status, resp)
	}
}
