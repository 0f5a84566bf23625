package app_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sms/smstest"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestRiskRoundTrips counts the round trips a send waits on, on the
// shared client: a challenged send with the risk score off, the same with
// a cached (mid) score, which adds none, a send that needs a lookup
// (mid: challenged; high: refused; low: sent in the vouched tier), a
// solved-tier send to compare with, and a low-scored solved send the
// solved cap's cut refused while the vouched tier's cap is full (sent in
// the solved cap without its cut), its score cached or asked, and the
// same send while the vouched tier has room (one step takes its place
// there, or else the uncut one): each at most 2, the lookup's own time
// aside.
func TestRiskRoundTrips(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{answers: map[string]guard.RiskAnswer{}, def: guard.RiskAnswer{Score: 50}}
	// The solved cap 10 (its cut 1), the vouched tier's 6: lookupLow's
	// sends and the vouched-room sends' fit in it, a few more fill it.
	a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Challenge.Floor, p.Risk.VouchedFloor = 10, 6 })
	trips := &requestTrips{hold: 200 * time.Millisecond}
	a.Redis().AddHook(trips)
	h := a.Handler()
	send := func(name, body string, want int) (seq int, resp []byte) {
		t.Helper()
		return tripSend(t, h, trips, name, body, want)
	}
	phone := func(i int) string { return `{"phone":"` + gbNumber(4, i) + `"}` }
	// fewest sends to each of phones in turn until one waits on at most
	// most sequential round trips, and returns the fewest seen. A path
	// whose round trips go side by side can still meet a goroutine that
	// the race detector on a loaded machine starts after its neighbour's
	// trip was released (the lookup's, beside the refusal's give-backs);
	// a path that puts them one after another does so every time.
	fewest := func(name string, want, most int, phones ...int) int {
		t.Helper()
		least := -1
		for _, i := range phones {
			seq, _ := send(name, phone(i), want)
			if least < 0 || seq < least {
				least = seq
			}
			if least <= most {
				break
			}
		}
		return least
	}
	floor, _ := send("the floor's send", phone(0), http.StatusOK) // the country's floor is 1: one send
	// A challenged send whose number has a cached mid score: the script
	// read it with the count.
	cached := gbNumber(4, 1)
	if status, code := riskSend(t, h, cached); status != http.StatusPreconditionRequired {
		t.Fatalf("caching a mid score: %d %s", status, code)
	}
	calls := f.calls.Load()
	withCache, resp := send("challenged, cached score", phone(1), http.StatusPreconditionRequired)
	if f.calls.Load() != calls {
		t.Errorf("a cached score was asked again")
	}
	lookupMid := fewest("challenged after a lookup (mid)", http.StatusPreconditionRequired, 2, 2, 6, 7)
	f.set(func(f *fakeRisk) { f.def = guard.RiskAnswer{Score: 90} })
	lookupHigh := fewest("refused after a lookup (high)", http.StatusForbidden, 2, 5, 8, 9)
	f.set(func(f *fakeRisk) { f.def = guard.RiskAnswer{Score: 5} })
	lookupLow := fewest("sent after a lookup (low, vouched)", http.StatusOK, 2, 3, 10, 11)

	solved, _ := send("solved tier", `{"phone":"`+cached+`","challenge":"`+solveBody(t, resp)+`"}`, http.StatusOK)

	solve := func(body []byte) string { return solveBody(t, body) }
	clearScore := func(phone string) {
		t.Helper()
		path := "/ops/risk/" + strings.Replace(phone, "+", "%2B", 1)
		if status, body := riskDo(h, http.MethodDelete, path, riskOpsKey, ""); status != http.StatusOK {
			t.Fatalf("DELETE /ops/risk: %d %s", status, body)
		}
	}
	// The solved cap is cut to 1, which the solved tier's send above holds.
	cut := tg.Prefix + "otp:vel:{GB}:solvedcut"
	if err := a.Redis().Set(t.Context(), cut, time.Now().Add(time.Hour).Unix(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// A number challenged while scored between, then scored low: its
	// solved send, refused by the cut, is sent in the vouched tier, which
	// has room: its place there, tried first in the uncut place's step,
	// beside the code's save.
	vouchedRoom := -1
	for i := 30; i < 33 && (vouchedRoom < 0 || vouchedRoom > 2); i++ {
		x := gbNumber(4, i)
		f.set(func(f *fakeRisk) { f.answers[x] = guard.RiskAnswer{Score: 50} })
		status, body := riskDo(h, http.MethodPost, "/otp/send", sendBenchKey, phone(i))
		if status != http.StatusPreconditionRequired {
			t.Fatalf("challenging a number scored between: %d %s", status, body)
		}
		f.set(func(f *fakeRisk) { delete(f.answers, x) })
		clearScore(x)
		seq, _ := send("solved, cut, vouched room, a lookup then low",
			`{"phone":"`+x+`","challenge":"`+solve(body)+`"}`, http.StatusOK)
		if vouchedRoom < 0 || seq < vouchedRoom {
			vouchedRoom = seq
		}
	}

	// Low-scored numbers fill the vouched tier's cap, then are challenged
	// (their low score cached). Each challenged number's solved send is
	// refused by the cut, its place in the vouched tier too, and sent in
	// the solved cap without its cut (9 places left).
	var past []string // a challenged number and its solution, in turn
	for i := 12; len(past) < 2*6 && i < 30; i++ {
		status, body := riskDo(h, http.MethodPost, "/otp/send", sendBenchKey, phone(i))
		switch status {
		case http.StatusOK: // a place in the vouched tier
			continue
		case http.StatusPreconditionRequired:
		default:
			t.Fatalf("filling the vouched tier: %d %s", status, body)
		}
		past = append(past, gbNumber(4, i), solve(body))
	}
	if len(past) < 2*6 {
		t.Fatalf("%d numbers challenged past the vouched tier's cap, want 6", len(past)/2)
	}
	// uncut sends each number of past[from:from+6] (3 of them) in turn,
	// its score asked anew with ask, until one waits on at most 2.
	uncut := func(name string, from int, ask bool) int {
		t.Helper()
		least := -1
		for j := from; j < from+6 && (least < 0 || least > 2); j += 2 {
			if ask {
				clearScore(past[j])
			}
			seq, _ := send(name, `{"phone":"`+past[j]+`","challenge":"`+past[j+1]+`"}`, http.StatusOK)
			if least < 0 || seq < least {
				least = seq
			}
		}
		return least
	}
	uncutCached := uncut("solved, cut, vouched full, cached low (uncut)", 0, false)
	uncutLookup := uncut("solved, cut, vouched full, a lookup then low (uncut)", 6, true)
	// The figures docs/abuse.md states ("The risk score"): a cached score
	// adds none; a lookup adds none either (its budget's place is taken
	// beside the send's first round trip, and the refusal's give-backs go
	// beside the lookup; after the answer, its cache write, with a high
	// score's hour given back, goes beside the held counts' give-back, or,
	// for a low score, which keeps them, beside the vouched tier's place
	// and the code's save, taken together).
	for _, c := range []struct {
		name      string
		got, most int
	}{{"the floor's send, no lookup", floor, 2}, {"challenged with a cached score", withCache, 2}, {"a lookup then mid", lookupMid, 2},
		{"a lookup then high (its hour given back beside the cache's write)", lookupHigh, 2},
		{"a lookup then low (the vouched place beside the code's save)", lookupLow, 2}, {"the solved tier", solved, 2},
		{"solved past the cut, vouched full, cached low (the uncut place beside the vouched one)", uncutCached, 2},
		{"solved past the cut, vouched full, a lookup then low", uncutLookup, 2},
		{"solved past the cut, vouched room (its place there tried first, in the uncut place's step)", vouchedRoom, 2}} {
		if c.got > c.most {
			t.Errorf("%s: %d sequential round trips, want at most %d", c.name, c.got, c.most)
		}
	}
	t.Logf("sequential round trips: cached score %d, lookup then mid %d, then high %d, then low %d, solved tier %d, "+
		"solved past the cut and the vouched cap: cached low %d, a lookup then low %d; past the cut, the vouched tier's room %d",
		withCache, lookupMid, lookupHigh, lookupLow, solved, uncutCached, uncutLookup, vouchedRoom)
}

// TestRiskSolvedCap: a solved send the solved cap refuses consults the
// score too: a mid one leaves the cap's refusal; a low one (after the
// operator cleared the mid score and the network changed its mind) sends
// it in the vouched tier.
func TestRiskSolvedCap(t *testing.T) {
	tg := redistest.New(t)
	f := &fakeRisk{answers: map[string]guard.RiskAnswer{}, def: guard.RiskAnswer{Score: 50}}
	a, _ := riskApp(t, tg, f, nil, func(p *guard.OTPPolicy) { p.Challenge.Floor = 1 })
	h := a.Handler()
	challenged := func(phone string) string {
		t.Helper()
		status, body := riskDo(h, http.MethodPost, "/otp/send", sendBenchKey, `{"phone":"`+phone+`"}`)
		if status != http.StatusPreconditionRequired {
			t.Fatalf("%s: %d %s, want 428", guard.MaskPhone(phone), status, body)
		}
		return solveBody(t, []byte(body))
	}
	solved := func(phone, sol string) (int, string) {
		status, body := riskDo(h, http.MethodPost, "/otp/send", sendBenchKey, `{"phone":"`+phone+`","challenge":"`+sol+`"}`)
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &p)
		return status, p.Code
	}
	if status, code := riskSend(t, h, gbNumber(7, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	first, second, third := gbNumber(7, 1), gbNumber(7, 2), gbNumber(7, 3)
	if status, code := solved(first, challenged(first)); status != http.StatusOK {
		t.Fatalf("the solved cap's send: %d %s", status, code)
	}
	if status, code := solved(second, challenged(second)); status != http.StatusTooManyRequests || code != "unusual_volume" {
		t.Errorf("mid, the solved cap spent: %d %s, want 429 unusual_volume", status, code)
	}
	sol := challenged(third) // mid: cached
	f.set(func(f *fakeRisk) { f.answers[third] = guard.RiskAnswer{Score: 4} })
	if status, body := riskDo(h, http.MethodDelete, "/ops/risk/"+strings.Replace(third, "+", "%2B", 1), riskOpsKey, ""); status != http.StatusOK {
		t.Fatalf("DELETE /ops/risk: %d %s", status, body)
	}
	before := f.calls.Load()
	if status, code := solved(third, sol); status != http.StatusOK {
		t.Errorf("low, the solved cap spent: %d %s, want 200 (vouched)", status, code)
	}
	if n := f.calls.Load() - before; n != 1 {
		t.Errorf("%d lookups, want 1", n)
	}
}

// TestRiskTwilioLookup: with the Twilio account set (and its base URL at
// the fake Lookup API) and no lookup of the caller's, the service asks
// Twilio Lookup through twilio-go: a magic high number is refused, a
// magic low one sent, a hung API is the challenge.
func TestRiskTwilioLookup(t *testing.T) {
	tg := redistest.New(t)
	const sid, token = "AC00000000000000000000000000000002", "token0123456789"
	f := smstest.NewLookup(t, sid, token)
	a, _ := riskApp(t, tg, nil, nil, nil, "TWILIO_ACCOUNT_SID", sid, "TWILIO_AUTH_TOKEN", token, "TWILIO_API_BASE_URL", f.URL)
	h := a.Handler()
	if status, code := riskSend(t, h, gbNumber(6, 0)); status != http.StatusOK {
		t.Fatalf("the floor's send: %d %s", status, code)
	}
	if status, code := riskSend(t, h, smstest.MagicHigh); status != http.StatusForbidden || code != "high_risk_number" {
		t.Errorf("magic high: %d %s, want 403 high_risk_number", status, code)
	}
	if status, code := riskSend(t, h, smstest.MagicLow); status != http.StatusOK {
		t.Errorf("magic low: %d %s, want 200", status, code)
	}
	if status, code := riskSend(t, h, smstest.MagicModerate); status != http.StatusPreconditionRequired {
		t.Errorf("magic moderate: %d %s, want 428", status, code)
	}
	f.SetMode(smstest.LookupHang)
	if status, code := riskSend(t, h, gbNumber(6, 1)); status != http.StatusPreconditionRequired {
		t.Errorf("hung Lookup: %d %s, want 428", status, code)
	}
	if n := f.Calls(); n != 4 {
		t.Errorf("%d lookups reached the fake, want 4", n)
	}
}

// tripSend posts body to /otp/send on h, counting its round trips on
// trips, and returns how many of them it waited on one after another,
// and the answer's body; an answer other than want fails the test.
func tripSend(t *testing.T, h http.Handler, trips *requestTrips, name, body string, want int) (seq int, resp []byte) {
	t.Helper()
	trips.start()
	req := httptest.NewRequest(http.MethodPost, "/otp/send", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+sendBenchKey)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(flushMark{w, trips}, req)
	total, seq, names := trips.stop()
	t.Logf("%s: %d, %d round trips, %d sequential: %v", name, w.Code, total, seq, names)
	if w.Code != want {
		t.Fatalf("%s: %d %s, want %d", name, w.Code, w.Body, want)
	}
	return seq, w.Body.Bytes()
}

// solveBody is the solution of the proof of work a 428's body carries.
func solveBody(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Challenge guard.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	p.Challenge.Type = guard.ChallengePoW
	return challenge.Solve(p.Challenge)
}
