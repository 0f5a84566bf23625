package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestShedRequestsSpendNothing: with every in-flight slot taken (a send
// held by its provider), a further decision is answered at once with 503
// overloaded and a Retry-After, is counted in otpguard_shed_total, and
// spends nothing: the limit it would have checked is still whole.
func TestShedRequestsSpendNothing(t *testing.T) {
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), limitPolicies())
	cfg.MaxInFlight = 1
	c := newClusterConfig(t, 1, cfg)
	c.out.Hold, c.out.Held = make(chan struct{}), make(chan struct{}, 1)

	sent := make(chan response, 1)
	go func() { sent <- c.do(t, 0, "POST", "/otp/send", `{"phone":"+14155550100"}`) }()
	<-c.out.Held // the send holds the only slot, its provider call in flight

	r := c.do(t, 0, "POST", "/limits/check", `{"policy":"search","key":"user:1"}`)
	if r.Status != http.StatusServiceUnavailable || r.json(t)["code"] != "overloaded" || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("check with every slot taken: %d %s (Retry-After %q), want 503 overloaded, Retry-After 1", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if got := scrapeMetric(t, c, `otpguard_shed_total{route="/limits/check"}`); got != "1" {
		t.Errorf(`otpguard_shed_total{route="/limits/check"} = %s, want 1`, got)
	}

	close(c.out.Hold)
	if s := <-sent; s.Status != http.StatusOK {
		t.Fatalf("the held send: %d %s", s.Status, s.Body)
	}
	peek := c.do(t, 0, "POST", "/limits/check", `{"policy":"search","key":"user:1","cost":0}`)
	d := peek.json(t)["decisions"].([]any)[0].(map[string]any)
	if d["remaining"] != d["limit"] {
		t.Errorf("after the shed check: remaining %v of %v, want the limit whole: a shed request spends nothing", d["remaining"], d["limit"])
	}
}

// scrapeMetric reads one sample of instance 0's /metrics.
func scrapeMetric(t *testing.T, c *cluster, series string) string {
	t.Helper()
	res, err := http.Get(c.instances[0].srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return "(absent)"
}
