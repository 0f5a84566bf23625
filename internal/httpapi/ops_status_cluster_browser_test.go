package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestOpsStatusBadgeShedAndDeadMasterInChromium is TestOpsStatusBadgeInChromium
// for the two states it cannot make on one Redis: one otpguard on a Redis
// Cluster of its own, at most one decision in flight, sending through the
// real twilio-go client to a fake Twilio that holds each message until the
// test lets it go. Shedding is real: a send held at Twilio takes the only
// slot and the next send is answered 503 overloaded. The dead master is
// real: the master of the heartbeat's slot is killed with its replica (so
// no promotion ends the state while the page loads), and the badge names
// it, not "Redis is down": the other masters answer.
func TestOpsStatusBadgeShedAndDeadMasterInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	rc := redistest.StartCluster(t)
	tw := newHeldTwilio(t)
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.CountryVelocity.Mode = guard.VelocityOff
	p.OTP.Conversion.Mode = guard.ConversionOff
	cfg := testConfig(t, "", redistest.Prefix(), t.TempDir(), p)
	cfg.Redis.Mode, cfg.Redis.Addrs = store.RedisCluster, rc.Addrs()
	cfg.RedisTimeout = 500 * time.Millisecond // a killed node refuses at once; a healthy one is waited for (testRedisMaxWait)
	cfg.MaxInFlight = 1
	cfg.SMS = "twilio"
	cfg.Twilio = config.TwilioConfig{AccountSID: "AC0123", AuthToken: "token", From: "+15005550006", BaseURL: tw.srv.URL}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard))
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { srv.Close(); a.Close() })
	c := &cluster{instances: []*instance{{srv: srv, rdb: a.Redis(), app: a}}}
	cc := a.Redis().(*redis.ClusterClient)

	victim := masterOf(t, cc, cfg.RedisPrefix+"{instances}") // the heartbeat's: the page must not say all of Redis is down
	replica := replicaOf(t, cc, victim)
	live, ips := ownKeysOff(t, cc, victim, p.OTP, 16) // keys on the live masters: the sends go on after the kill
	next := 0
	send := func() string { // each send a number and an address of its own
		next++
		return fmt.Sprintf(`{"phone":%q,"client_ip":%q}`, live[next%len(live)], ips[next%len(ips)])
	}
	// shed holds a send at Twilio, the only slot taken, and sends again:
	// that one is shed. A send answered before it reached Twilio (its
	// decision given up on a host too busy) is made again.
	shed := func(t *testing.T) {
		t.Helper()
		sent := make(chan response, 1)
		for try := 1; ; try++ {
			body := send()
			go func() { sent <- c.do(t, 0, "POST", "/otp/send", body) }()
			r, held := tw.waitHeld(t, sent)
			if held {
				break
			}
			if try == 5 {
				t.Fatalf("5 sends answered without reaching Twilio; the last: %d %s", r.Status, r.Body)
			}
		}
		r := c.do(t, 0, "POST", "/otp/send", send())
		tw.release()
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"code":"overloaded"`) {
			t.Errorf("a send with the only slot held: %d %s, want 503 overloaded", r.Status, r.Body)
		}
		if s := <-sent; s.Status != http.StatusOK {
			t.Fatalf("the held send: %d %s", s.Status, s.Body)
		}
	}

	opsWait(t, "the database up", func() bool {
		return strings.Contains(string(c.doKey(t, 0, "GET", "/ops/status", "", opsKey).Body), `"database":{"state":"up"`)
	})
	base := srv.URL
	ctx := browsertest.Headless(t, exe, 3*time.Minute)
	signInChromium(t, ctx, base, `#status-badge`)
	tests := []struct {
		name string
		hurt func(t *testing.T) // the states last: each after the first is worse
		want badgeWant
	}{
		{name: "nothing holds", hurt: func(*testing.T) {}, want: badgeWant{code: "ok", class: "ok", text: "all systems normal"}},
		{name: "shedding", hurt: shed, want: badgeWant{code: "shedding", class: "warn", text: "503 overloaded"}},
		{name: "a dead master", hurt: func(t *testing.T) {
			t.Logf("kill %s's replica %s, then %s (the heartbeat's master)", victim, replica, victim)
			if !rc.KillNode(replica) || !rc.KillNode(victim) {
				t.Fatalf("%s or %s is not a running node of the cluster", victim, replica)
			}
			opsWait(t, "the probe to open the dead master's breaker", func() bool { return nodeBreaker(t, c, victim) == "open" })
		}, want: badgeWant{code: "node_down", class: "bad", text: victim}},
		{name: "shedding under a dead master", hurt: shed, want: badgeWant{code: "node_down", class: "bad", text: victim, more: "503 overloaded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.hurt(t)
			checkBadge(t, ctx, base, tt.want)
		})
	}
}

// nodeBreaker is the breaker of the Redis Cluster master addr, as the
// instance's /ops/status reports it ("" when not listed).
func nodeBreaker(t *testing.T, c *cluster, addr string) string {
	t.Helper()
	var st struct {
		Nodes []struct{ Node, Breaker string }
	}
	if err := json.Unmarshal(c.doKey(t, 0, "GET", "/ops/status", "", opsKey).Body, &st); err != nil {
		t.Fatalf("/ops/status: %v", err)
	}
	i := slices.IndexFunc(st.Nodes, func(n struct{ Node, Breaker string }) bool { return n.Node == addr })
	if i < 0 {
		return ""
	}
	return st.Nodes[i].Breaker
}

// heldTwilio is a fake Twilio Messages API that holds each message until
// the test lets it go: the real twilio-go client's call, and the decision
// slot of the send that made it, stay in flight meanwhile.
type heldTwilio struct {
	srv    *httptest.Server
	held   chan struct{} // a message arrived
	answer chan struct{} // answers one held message
}

func newHeldTwilio(t *testing.T) *heldTwilio {
	t.Helper()
	h := &heldTwilio{held: make(chan struct{}, 1), answer: make(chan struct{})}
	done := make(chan struct{})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Errorf("fake twilio: %v", err)
		}
		h.held <- struct{}{}
		select {
		case <-h.answer:
		case <-r.Context().Done():
			return
		case <-done:
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"sid": "SM0123456789abcdef0123456789abcdef", "status": "queued"})
	}))
	t.Cleanup(func() { close(done); h.srv.Close() })
	return h
}

// waitHeld waits for a message to be held (true), or for the send that
// was to make it to be answered without (false, its answer).
func (h *heldTwilio) waitHeld(t *testing.T, sent <-chan response) (response, bool) {
	t.Helper()
	select {
	case <-h.held:
		return response{}, true
	case r := <-sent:
		return r, false
	case <-time.After(opsWaitFor):
		t.Fatalf("no message reached the fake Twilio within %s", opsWaitFor)
		return response{}, false
	}
}

// release answers the message held.
func (h *heldTwilio) release() { h.answer <- struct{}{} }
