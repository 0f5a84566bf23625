package app_test

import (
	"net/http"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestRiskBudgetEarnBack: a lookup that refuses its send earns its place
// in the hour's window back and stays in the day's, over three instances
// on one Redis: 30 refused sends, one after another (a place comes back
// once its lookup has answered), of numbers the network scores
// high (or blocks) are looked up up to the day's window (10), not the
// hour's (3), and every lookup refuses; numbers scored between or low
// spend the hour's window as before (3 lookups, the rest the challenge).
func TestRiskBudgetEarnBack(t *testing.T) {
	cases := []struct {
		name    string
		answer  guard.RiskAnswer
		calls   int64
		refused int // 403 high_risk_number
		sent    int // vouched
	}{
		{"high: the day's window", guard.RiskAnswer{Score: 90}, 10, 10, 0},
		{"blocked: the day's window", guard.RiskAnswer{Score: 40, Blocked: true}, 10, 10, 0},
		{"mid: the hour's window", guard.RiskAnswer{Score: 50}, 3, 0, 0},
		{"low: the hour's window", guard.RiskAnswer{Score: 5}, 3, 0, 3},
	}
	for run, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := redistest.New(t)
			f := &fakeRisk{def: c.answer}
			var hs []http.Handler
			for range 3 {
				a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Risk.PerHour, p.Risk.PerDay = 3, 10 })
				hs = append(hs, a.Handler())
			}
			f.set(func(f *fakeRisk) { f.def = guard.RiskAnswer{Score: 50} })
			if status, code := riskSend(t, hs[0], gbNumber(30+run, 0)); status != http.StatusOK {
				t.Fatalf("the floor's send: %d %s", status, code)
			}
			f.set(func(f *fakeRisk) { f.def = c.answer })
			counts := map[int]int{}
			for i := range 30 {
				status, _ := riskSend(t, hs[i%len(hs)], gbNumber(30+run, i+1))
				counts[status]++
			}
			if n := f.calls.Load(); n != c.calls {
				t.Errorf("%d lookups, want %d", n, c.calls)
			}
			challenged := 30 - c.refused - c.sent
			if counts[http.StatusForbidden] != c.refused || counts[http.StatusOK] != c.sent || counts[http.StatusPreconditionRequired] != challenged {
				t.Errorf("30 refused sends: %v, want %d refused, %d sent, %d challenged", counts, c.refused, c.sent, challenged)
			}
		})
	}
}
