package app_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/app"
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

// TestRiskBudgetExactConcurrent: the lookup budget's place is taken
// beside a send's first round trip and given back when the send does not
// ask its score; over two instances on one Redis, concurrent sends (new
// numbers refused by the velocity floor, each wanting a lookup; numbers
// whose mid score is cached, which want none; the first sends of other
// countries, let through) leave the budget's hour and day windows
// counting exactly the lookups made, and never more than the hour's. (How
// many of the refused sends get a lookup is not fixed: a place in flight
// for a send that gives it back can make another find the hour spent.)
func TestRiskBudgetExactConcurrent(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{def: guard.RiskAnswer{Score: 50}, delay: 20 * time.Millisecond}
	const perHour = 10
	var hs []http.Handler
	var first *app.App
	for range 2 {
		a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Risk.PerHour, p.Risk.PerDay = perHour, 100 })
		if first == nil {
			first = a
		}
		hs = append(hs, a.Handler())
	}
	if status, code := riskSend(t, hs[0], gbNumber(40, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	var cached []string
	for i := range 4 {
		phone := gbNumber(41, i)
		if status, code := riskSend(t, hs[i%2], phone); status != http.StatusPreconditionRequired {
			t.Fatalf("caching a mid score: %d %s", status, code)
		}
		cached = append(cached, phone)
	}
	phones := slices.Clone(cached)
	for i := range 24 {
		phones = append(phones, gbNumber(42, i))
	}
	phones = append(phones, "+4915123456789", "+33612345678", "+31612345678", "+919800000001", "+2348031234567", "+34612345678")
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i, phone := range phones {
		wg.Go(func() {
			status, _ := riskSend(t, hs[i%2], phone)
			mu.Lock()
			counts[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if counts[http.StatusOK]+counts[http.StatusPreconditionRequired] != len(phones) {
		t.Errorf("%d sends: %v, want each 200 or 428", len(phones), counts)
	}
	lookups := f.calls.Load()
	hk, dk := tg.Prefix+"otp:risk:{budget}:h", tg.Prefix+"otp:risk:{budget}:d"
	for _, k := range []string{hk, dk} {
		n, err := first.Redis().Get(context.Background(), k).Int64()
		if err != nil {
			t.Fatalf("reading %s: %v", k, err)
		}
		if n != lookups {
			t.Errorf("%s counts %d, want the %d lookups made", k, n, lookups)
		}
	}
	if lookups > perHour {
		t.Errorf("%d lookups, want at most the hour's %d", lookups, perHour)
	}
	t.Logf("%d lookups, answers %v", lookups, counts)
}
