package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

const signalsScenario = `
start: 2026-03-02T00:00:00Z
duration: 1h
lookup_price: 0.02
populations:
  - {name: NG users, country: NG, per_minute: 1, carriers: [MTN, glo]}
  - {name: NG bot, country: NG, per_minute: 5, from: 0s, carriers: [9mobile], risk: {high: 0.8, low: 0.05}, role: attacker}
  - {name: GB users, country: GB, per_minute: 1, role: user}
`

func TestParseSignals(t *testing.T) {
	s, err := Parse([]byte(signalsScenario))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.LookupPrice != 0.02 {
		t.Errorf("lookup_price: got %v, want 0.02", s.LookupPrice)
	}
	users, bot, gb := s.Populations[0], s.Populations[1], s.Populations[2]
	if !slices.Equal(users.Carriers, []string{"MTN", "glo"}) || !bot.attacker() || users.attacker() || gb.attacker() {
		t.Errorf("got carriers %v, attackers %v %v %v; want [MTN glo], only the bot", users.Carriers, users.attacker(), bot.attacker(), gb.attacker())
	}
	for _, tc := range []struct {
		name      string
		p         Population
		high, low float64
	}{
		{"default", users, 0.01, 0.9},
		{"given", bot, 0.8, 0.05},
	} {
		if high, low := tc.p.riskShares(); high != tc.high || low != tc.low {
			t.Errorf("%s risk: got high %v low %v, want %v %v", tc.name, high, low, tc.high, tc.low)
		}
	}
	only := 0.3
	if high, low := (&Population{Risk: &RiskShares{High: &only}}).riskShares(); high != 0.3 || low != 0 {
		t.Errorf("risk {high: 0.3}: got high %v low %v, want 0.3 and 0 (a share left out of a block given is 0)", high, low)
	}
	d, err := Parse([]byte("start: 2026-03-02T00:00:00Z\nduration: 1h\npopulations: [{name: a, country: IN, per_minute: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.LookupPrice != 0.01 || d.Populations[0].Carriers != nil || d.Populations[0].attacker() {
		t.Errorf("defaults: lookup_price %v, carriers %v, attacker %v; want 0.01, none, false",
			d.LookupPrice, d.Populations[0].Carriers, d.Populations[0].attacker())
	}
}

// TestParseRefusesSignals: a carrier the country's ranges do not carry
// is refused with the list of those they do; so are bad risk shares,
// roles and prices.
func TestParseRefusesSignals(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown carrier", "[MTN, glo]", "[MTN, Etisalat]", `populations[0].carriers: "Etisalat" is not a carrier of NG (its mobile ranges name: 9mobile, Airtel, Glo,`},
		{"carriers with prefixes", "carriers: [9mobile]", `carriers: [9mobile], prefixes: ["+234809"]`, "populations[1].carriers: give carriers or prefixes, not both"},
		{"carriers not a list", "carriers: [9mobile]", "carriers: {a: b}", "populations[1].carriers (line"},
		{"risk above 1", "high: 0.8", "high: 1.8", "populations[1].risk: high 1.8 and low 0.05"},
		{"risk negative", "low: 0.05", "low: -0.05", "populations[1].risk: high 0.8 and low -0.05"},
		{"risk adds past 1", "low: 0.05", "low: 0.3", "populations[1].risk: high 0.8 and low 0.3 must be shares"},
		{"risk unknown share", "low: 0.05", "mid: 0.05", "populations[1].risk.mid (line"},
		{"risk not a number", "high: 0.8", "high: most", "populations[1].risk.high (line"},
		{"bad role", "role: attacker", "role: bot", `populations[1].role: "bot" is not user or attacker`},
		{"negative lookup price", "lookup_price: 0.02", "lookup_price: -1", "lookup_price: -1 USD per lookup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(signalsScenario, tc.from, tc.to, 1)
			if doc == signalsScenario {
				t.Fatalf("the case changes nothing: %q not found", tc.from)
			}
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: got %v, want it to name %q", err, tc.want)
			}
		})
	}
}

// TestCarrierDraws: a population's new numbers all belong to the
// carriers it names (guard.CarrierOf), each of them gets some, and the
// ring's one carrier holds at most a tenth of the country's ranges.
func TestCarrierDraws(t *testing.T) {
	s, err := Parse([]byte(signalsScenario))
	if err != nil {
		t.Fatal(err)
	}
	// GB's carriers split its ranges four digits deep and deeper: there
	// a range labelled by its majority holds numbers of other carriers.
	s.Populations = append(s.Populations, Population{Name: "GB users", Country: "GB", Carriers: []string{"vodafone"}})
	for i, want := range []map[string]bool{{"MTN": true, "Glo": true}, {"9mobile": true}, 3: {"Vodafone": true}} {
		if want == nil {
			continue
		}
		ps, err := newPopState(s, i)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for range 1000 {
			got[carrierOfNumber(ps.newNumber()).Name]++
		}
		for c, n := range got {
			if !want[c] {
				t.Errorf("%s: %d of 1000 numbers of %s, which it does not name", ps.p.Name, n, c)
			}
		}
		for c := range want {
			if got[c] < 100 {
				t.Errorf("%s: %d of 1000 numbers of %s; want its share", ps.p.Name, got[c], c)
			}
		}
	}
	src, err := newNumberSource("NG", nil)
	if err != nil {
		t.Fatal(err)
	}
	var all, ring float64
	for _, lr := range src.labelRanges() {
		all += lr.weight
		if lr.carrier.Name == "9mobile" {
			ring += lr.weight
		}
	}
	if ring == 0 || ring/all > 0.1 {
		t.Errorf("9mobile holds %.1f of NG's %.0f mobile ranges; the scenarios want a carrier with at most a tenth", ring, all)
	}
}

// TestRiskShares: the network scores a population's numbers by its
// shares, each number once, from a stream apart from its draws.
func TestRiskShares(t *testing.T) {
	s, err := Parse([]byte(signalsScenario))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for i, want := range []map[int]float64{{RiskHigh: 0.01, RiskLow: 0.9, RiskMid: 0.09}, {RiskHigh: 0.8, RiskLow: 0.05, RiskMid: 0.15}} {
		ps, err := newPopState(s, i)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := newPopState(s, i)
		if err != nil {
			t.Fatal(err)
		}
		ps.risk = newRiskNetwork(func() time.Time { return now })
		got := map[int]int{}
		const n = 2000
		for range n {
			phone := ps.newNumber()
			if other := plain.newNumber(); other != phone {
				t.Fatalf("%s: scoring moved the draws: %s, without scores %s", ps.p.Name, phone, other)
			}
			a, err := ps.risk.LookupRisk(context.Background(), phone)
			if err != nil {
				t.Fatal(err)
			}
			got[a.Score]++
			if !a.At.Equal(now) {
				t.Errorf("answer's time: got %v, want the virtual clock's %v", a.At, now)
			}
		}
		for score, share := range want {
			if g := float64(got[score]) / n; math.Abs(g-share) > 0.03 {
				t.Errorf("%s: %.3f of numbers scored %d, want %.2f", ps.p.Name, g, score, share)
			}
		}
		if k := ps.risk.take(); k != n {
			t.Errorf("%s: %d lookups counted, want %d", ps.p.Name, k, n)
		}
	}
}

func TestRiskNetworkKeepsFirstScore(t *testing.T) {
	net := newRiskNetwork(time.Now)
	net.made("+2348090000001", func() int { return RiskHigh })
	net.made("+2348090000001", func() int { t.Error("a number made again was scored again"); return RiskLow })
	if a, err := net.LookupRisk(context.Background(), "+2348090000001"); err != nil || a.Score != RiskHigh {
		t.Errorf("got %v, %v; want %d", a, err, RiskHigh)
	}
	if _, err := net.LookupRisk(context.Background(), "+2348090000002"); !errors.Is(err, errUnknownNumber) {
		t.Errorf("a number no population made: got %v, want errUnknownNumber", err)
	}
	if k := net.take(); k != 2 {
		t.Errorf("lookups: got %d, want 2 (an unknown number's lookup counts too)", k)
	}
	if k := net.take(); k != 0 {
		t.Errorf("lookups after take: got %d, want 0", k)
	}
}

// TestCaptchaFarm runs a policy of otp.challenge.type captcha against
// the fake provider: the farm's solved challenges are sent (its tokens
// accepted, none answered challenge_unavailable or challenged again), the
// bot that solves none gets far fewer, and the report counts the tries by
// carrier and sums them by role.
func TestCaptchaFarm(t *testing.T) {
	rep := run(t, "captcha-scenario.yaml")
	farm, bot, users := rep.Populations["NG farm"], rep.Populations["NG bot"], rep.Populations["NG users"]
	if farm.Challenged == 0 || farm.Sent <= bot.Sent {
		t.Errorf("farm: %d challenged, %d sent; bot %d sent; want the farm challenged and sent more", farm.Challenged, farm.Sent, bot.Sent)
	}
	for _, code := range []string{"challenge_required", "challenge_unavailable"} {
		if n := farm.RefusedByCode[code]; n > 0 {
			t.Errorf("farm: %d solved challenges answered %s: the fake provider refused its tokens", n, code)
		}
	}
	if c := farm.Carriers["9mobile"]; len(farm.Carriers) != 1 || c == nil || c.Tried != farm.Tried || c.Sent != farm.Sent {
		t.Errorf("farm's carriers: got %v, want all of its %d tries on 9mobile", farm.Carriers, farm.Tried)
	}
	if len(bot.Carriers) < 4 {
		t.Errorf("bot's carriers: got %d, want its random mobiles spread over NG's carriers", len(bot.Carriers))
	}
	want := Summary{UsersTried: users.Tried, UsersWithoutCode: users.Tried - users.Sent,
		AttackersTried: farm.Tried + bot.Tried, AttackersSent: farm.Sent + bot.Sent, AttackersCost: cents(farm.Cost + bot.Cost)}
	if rep.Summary == nil || *rep.Summary != want {
		t.Errorf("summary: got %+v, want %+v", rep.Summary, want)
	}
}

// TestReportSignalKeys holds the new keys of the JSON to what
// docs/simulate.md documents: lookups and their cost, the carriers and
// the summary, each present only when the run has it.
func TestReportSignalKeys(t *testing.T) {
	s, err := Parse([]byte(signalsScenario))
	if err != nil {
		t.Fatal(err)
	}
	rep := newReport(s)
	at := s.Start.Add(10 * time.Minute)
	for _, c := range rep.counts(s, "NG bot", at) {
		c.Tried, c.Lookups = 4, 3
		c.ofCarrier("9mobile").Tried = 4
	}
	rep.roundCosts(s.LookupPrice)
	rep.summarise(s)
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Populations map[string]map[string]any
		Summary     map[string]any
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	bot := doc.Populations["NG bot"]
	if bot["lookups"] != 3.0 || bot["lookup_cost"] != 0.06 {
		t.Errorf("NG bot: lookups %v, lookup_cost %v; want 3 and 0.06", bot["lookups"], bot["lookup_cost"])
	}
	carriers, _ := bot["carriers"].(map[string]any)
	if got, _ := carriers["9mobile"].(map[string]any); got == nil || got["tried"] != 4.0 || len(got) != 4 {
		t.Errorf("NG bot's carriers: got %v, want 9mobile with tried, sent, challenged, refused", carriers)
	}
	for _, k := range []string{"lookups", "lookup_cost", "carriers"} {
		if _, ok := doc.Populations["GB users"][k]; ok {
			t.Errorf("GB users: %s present, want it left out when empty", k)
		}
	}
	wantSummary := []string{"attackers_cost", "attackers_sent", "attackers_tried", "lookup_cost", "lookups", "users_tried", "users_without_code"}
	if got := sortedKeys(doc.Summary); !slices.Equal(got, wantSummary) || doc.Summary["lookups"] != 3.0 || doc.Summary["attackers_tried"] != 4.0 {
		t.Errorf("summary: got %v, want keys %v with 3 lookups and 4 attackers' tries", doc.Summary, wantSummary)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"risk lookups", "9mobile", "real users without a code: 0 of 0", "attackers' SMS: 0 of 4 tried"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table: no %q:\n%s", want, table.String())
		}
	}
	plain := newReport(&Scenario{Start: s.Start, Duration: s.Duration, Populations: []Population{{Name: "GB users"}}})
	table.Reset()
	if err := plain.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, unwanted := range []string{"risk lookups", "carrier", "real users without"} {
		if strings.Contains(table.String(), unwanted) {
			t.Errorf("a report without the new fields writes %q:\n%s", unwanted, table.String())
		}
	}
}

// TestCaptchaProviderAcceptsTheSolversTokensOnce: the fake siteverify
// says success, on the simulated site, for a token the solver made,
// once, with the right secret; for any other token, false.
func TestCaptchaProviderAcceptsTheSolversTokensOnce(t *testing.T) {
	c, err := newCaptchaProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func(secret, token string) (ok bool, host string) {
		t.Helper()
		resp, err := http.PostForm(c.verifyURL(), url.Values{"secret": {secret}, "response": {token}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct {
			Success  bool   `json:"success"`
			Hostname string `json:"hostname"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatal(err)
		}
		return ans.Success, ans.Hostname
	}
	made, other := c.token(), c.token()
	for _, tc := range []struct {
		name, secret, token string
		want                bool
	}{
		{"a token the solver made", captchaSecret, made, true},
		{"the same token again", captchaSecret, made, false},
		{"a token nobody made", captchaSecret, "simulated-token-99", false},
		{"the wrong secret", "guess", other, false},
	} {
		if ok, host := ask(tc.secret, tc.token); ok != tc.want || (ok && host != captchaHost) {
			t.Errorf("%s: got success %v on %q, want %v on %q", tc.name, ok, host, tc.want, captchaHost)
		}
	}
}
