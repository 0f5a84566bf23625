package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// TestOutageLogsOneLinePerOutage: the outage itself is told by one WARN
// line (the breaker opening), however many requests meet it and however
// many probes fail, and none at ERROR. Refused limit checks of closed
// policies log at debug; each refused OTP send and verify keeps its info
// request line (docs/observability.md: every error keeps its line).
func TestOutageLogsOneLinePerOutage(t *testing.T) {
	var mu sync.Mutex
	var logs bytes.Buffer
	oc := newOutageCluster(t, 1, outagePolicies(), outageOptions{
		Output: &lockedWriter{w: &logs, mu: &mu}, LogLevel: "info",
		// Short, so that many probes fail while the requests are refused.
		Breaker: resilience.BreakerOptions{OpenFor: 20 * time.Millisecond},
	})
	oc.waitInstances(t, 1)
	for range 3 {
		if r := oc.do(t, 0, "POST", "/limits/check", checkBody("closed-fw", "x")); r.Status != http.StatusOK {
			t.Fatalf("healthy check: %d %s", r.Status, r.Body)
		}
	}
	mu.Lock()
	logs.Reset() // start-up's lines are not the outage's
	mu.Unlock()

	oc.proxy.BlackHole()
	const n = 40
	refused := 0
	refusedOTP := map[string]int{} // per route
	for i := 0; i < n || oc.fbs[0].Status().Breaker == "closed"; i++ {
		if i > 10*n {
			t.Fatal("the breaker never opened")
		}
		path, body := "/limits/check", checkBody("closed-fw", "x")
		switch i % 3 { // OTP sends and verifies: closed by default
		case 1:
			path, body = "/otp/send", `{"phone":"+14155550100"}`
		case 2:
			path, body = "/otp/verify", `{"phone":"+14155550100","code":"123456"}`
		}
		if r := oc.do(t, 0, "POST", path, body); r.Status == http.StatusServiceUnavailable {
			refused++
			if path != "/limits/check" {
				refusedOTP[path]++
			}
		}
		time.Sleep(5 * time.Millisecond) // let probes come due between requests
	}
	if refused < n {
		t.Fatalf("%d requests refused, want at least %d", refused, n)
	}

	mu.Lock()
	defer mu.Unlock()
	var loud []string
	lines := map[string]int{} // info request lines of 503 store_unavailable, per route
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level  string `json:"level"`
			Msg    string `json:"msg"`
			Route  string `json:"route"`
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if rec.Level == "WARN" || rec.Level == "ERROR" {
			loud = append(loud, rec.Level+" "+rec.Msg)
		}
		if rec.Msg == "request" && rec.Status == http.StatusServiceUnavailable && rec.Code == "store_unavailable" {
			lines[rec.Route]++
		}
	}
	if len(loud) != 1 || !strings.Contains(loud[0], "redis breaker open") {
		t.Errorf("%d requests refused in one outage: WARN/ERROR lines %q, want exactly one, the breaker opening", refused, loud)
	}
	for _, route := range []string{"/otp/send", "/otp/verify"} {
		if refusedOTP[route] == 0 || lines[route] != refusedOTP[route] {
			t.Errorf("%s: %d refused with 503, %d info request lines store_unavailable; want one line each", route, refusedOTP[route], lines[route])
		}
	}
	if lines["/limits/check"] != 0 {
		t.Errorf("/limits/check: %d info request lines store_unavailable, want none (debug)", lines["/limits/check"])
	}
}

// TestCodesLostOnEmptyRestart holds what docs/outage.md says of a Redis
// that restarts empty: a code sent before it is gone (verify answers
// no_active_code, even with the right code; under on_store_error local no
// stateless code stands in for it, since the SMS carried a random code no
// instance can recompute), and a new send works at once (its cooldown was
// lost with it).
func TestCodesLostOnEmptyRestart(t *testing.T) {
	for _, mode := range []limit.FallbackMode{limit.FallbackClosed, limit.FallbackLocal} {
		t.Run(string(mode), func(t *testing.T) {
			p := outagePolicies()
			p.OTP.OnStoreError = mode
			if mode == limit.FallbackLocal {
				p.OTP.LocalLimit = 1
			}
			oc := newOutageCluster(t, 2, p, outageOptions{Timeout: time.Second})
			const phone = "+14155550142"
			if r := oc.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != http.StatusOK {
				t.Fatalf("send: %d %s", r.Status, r.Body)
			}
			code := oc.out.LastCode(t, phone)
			oc.redis.Kill()
			oc.redis.Restart()
			var r response
			deadline := time.Now().Add(10 * time.Second)
			for { // bounded poll: the clients reconnect to the restarted server
				r = oc.do(t, 1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+code+`"}`)
				if r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Under local, an instance that saw the store fail within a
			// code_ttl checks stateless codes instead: wrong_code.
			lost := strings.Contains(string(r.Body), `"no_active_code"`) ||
				(mode == limit.FallbackLocal && strings.Contains(string(r.Body), `"wrong_code"`))
			if r.Status != http.StatusBadRequest || !lost {
				t.Fatalf("verify of a code sent before the empty restart: %d %s, want 400 no_active_code", r.Status, r.Body)
			}
			if r := oc.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != http.StatusOK {
				t.Fatalf("a new send after the restart: %d %s, want 200", r.Status, r.Body)
			}
			if r := oc.do(t, 1, "POST", "/otp/verify", `{"phone":"`+phone+`","code":"`+oc.out.LastCode(t, phone)+`"}`); r.Status != http.StatusOK {
				t.Errorf("verify of the new code: %d %s, want 200", r.Status, r.Body)
			}
		})
	}
}
