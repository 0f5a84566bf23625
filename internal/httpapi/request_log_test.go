package httpapi_test

import (
	"strconv"
	"testing"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/limit"
)

// TestRequestLogSamplesAllowedChecks: of the allowed /limits/check answers
// the first and then one in OTPGUARD_LOG_ALLOWED_CHECKS get their line at
// INFO, the rest at DEBUG; every denied check is at INFO whatever the
// sample.
func TestRequestLogSamplesAllowedChecks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		level     string
		every     int // 0: the default
		allowed   int
		wantInfo  int // allowed checks' lines at INFO
		wantDebug int
	}{
		{name: "default: the first and one in 100", level: "info", allowed: 250, wantInfo: 3},
		{name: "one in 7", level: "info", every: 7, allowed: 30, wantInfo: 5},
		{name: "every one", level: "info", every: 1, allowed: 30, wantInfo: 30},
		{name: "debug still has a line per request", level: "debug", allowed: 250, wantInfo: 3, wantDebug: 247},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := whyPolicies()
			p.Limits["big"] = limit.Policy{Algorithm: limit.FixedWindow, Limit: 1_000_000, Window: 3600e9}
			p.FillDefaults()
			c, logs := loggedInstance(t, tc.level, p, func(cfg *config.Config) {
				if tc.every != 0 {
					cfg.LogAllowedChecks = tc.every
				}
			})
			// One allowed check that empties key d of policy api (5
			// tokens), then 9 denied ones, then the rest of the allowed.
			if r := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":"d","cost":5}`); r.Status != 200 {
				t.Fatalf("first check: %d %s", r.Status, r.Body)
			}
			for i := 0; i < 9; i++ {
				if r := c.do(t, 0, "POST", "/limits/check", `{"policy":"api","key":"d"}`); r.Status != 429 {
					t.Fatalf("denied check %d: %d %s, want 429", i, r.Status, r.Body)
				}
			}
			for i := 1; i < tc.allowed; i++ {
				if r := c.do(t, 0, "POST", "/limits/check", `{"policy":"big","key":"k`+strconv.Itoa(i)+`"}`); r.Status != 200 {
					t.Fatalf("check %d: %d %s", i, r.Status, r.Body)
				}
			}
			got := map[string]int{}
			for _, l := range logs.requestLines(t) {
				if l["route"] != "/limits/check" {
					continue
				}
				got[l["level"].(string)+" "+strconv.Itoa(int(l["status"].(float64)))]++
			}
			if got["INFO 429"] != 9 {
				t.Errorf("denied checks at INFO: got %d, want 9 (every one); lines by level and status: %v", got["INFO 429"], got)
			}
			if got["INFO 200"] != tc.wantInfo || got["DEBUG 200"] != tc.wantDebug {
				t.Errorf("allowed checks: got %d at INFO and %d at DEBUG, want %d and %d", got["INFO 200"], got["DEBUG 200"], tc.wantInfo, tc.wantDebug)
			}
		})
	}
}
