package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// TestOutageLogsOneLinePerOutage: requests refused during an outage (limit
// checks and OTP sends of closed policies) log at
// debug; the outage itself is told by one WARN line (the breaker opening),
// however many requests meet it and however many probes fail, and none at
// ERROR.
func TestOutageLogsOneLinePerOutage(t *testing.T) {
	var mu sync.Mutex
	var logs bytes.Buffer
	oc := newOutageCluster(t, 1, outagePolicies(), outageOptions{
		Output: &lockedWriter{w: &logs, mu: &mu}, LogLevel: "info",
		// Short, so that many probes fail while the requests are refused.
		Breaker: guard.BreakerOptions{OpenFor: 20 * time.Millisecond},
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
	for i := 0; i < n || oc.fbs[0].Status().Breaker == "closed"; i++ {
		if i > 10*n {
			t.Fatal("the breaker never opened")
		}
		path, body := "/limits/check", checkBody("closed-fw", "x")
		if i%2 == 1 { // OTP sends: closed by default
			path, body = "/otp/send", `{"phone":"+14155550100"}`
		}
		if r := oc.do(t, 0, "POST", path, body); r.Status == http.StatusServiceUnavailable {
			refused++
		}
		time.Sleep(5 * time.Millisecond) // let probes come due between requests
	}
	if refused < n {
		t.Fatalf("%d requests refused, want at least %d", refused, n)
	}

	mu.Lock()
	defer mu.Unlock()
	var loud []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if rec.Level == "WARN" || rec.Level == "ERROR" {
			loud = append(loud, rec.Level+" "+rec.Msg)
		}
	}
	if len(loud) != 1 || !strings.Contains(loud[0], "redis breaker open") {
		t.Errorf("%d requests refused in one outage: WARN/ERROR lines %q, want exactly one, the breaker opening", refused, loud)
	}
}
