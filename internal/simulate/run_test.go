package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// run runs testdata/name afresh.
func run(t *testing.T, name string) *Report {
	t.Helper()
	rep, progress, err := runScenario(t.Context(), name)
	if err != nil {
		t.Fatalf("Run %s: %v\n%s", name, err, progress)
	}
	t.Logf("%s: %s", name, progress)
	return rep
}

func runScenario(ctx context.Context, name string) (*Report, string, error) {
	s, err := Load(filepath.Join("testdata", name))
	if err != nil {
		return nil, "", err
	}
	var progress bytes.Buffer
	rep, err := Run(ctx, s, Options{Progress: &progress})
	return rep, progress.String(), err
}

// shared is the report of testdata/name, run once for every test that
// reads it: the tests only read a report, and a run is the expensive
// part.
func shared(t *testing.T, name string) *Report {
	t.Helper()
	sharedRuns.Lock()
	once, ok := sharedRuns.m[name]
	if !ok {
		once = sync.OnceValues(func() (*Report, error) {
			rep, progress, err := runScenario(context.Background(), name)
			if err != nil {
				return nil, fmt.Errorf("%w\n%s", err, progress)
			}
			return rep, nil
		})
		sharedRuns.m[name] = once
	}
	sharedRuns.Unlock()
	rep, err := once()
	if err != nil {
		t.Fatalf("Run %s: %v", name, err)
	}
	return rep
}

var sharedRuns = struct {
	sync.Mutex
	m map[string]func() (*Report, error)
}{m: map[string]func() (*Report, error){}}

// TestBudgetRefusals runs one SMS a minute for two hours through the
// real service with a spend budget of 30 an hour: each hour's window
// sends exactly 30 and refuses the rest as budget_exhausted, and every
// code sent is typed and verified.
func TestBudgetRefusals(t *testing.T) {
	rep := shared(t, "budget-scenario.yaml")
	want := &Counts{Tried: 120, Sent: 60, Refused: 60, Verified: 60, Cost: 60 * DefaultPrices["GB"],
		RefusedByCode: map[string]int{"budget_exhausted": 60}}
	if diff := cmp.Diff(want, rep.Populations["GB users"]); diff != "" {
		t.Errorf("campaign counts (-want +got):\n%s", diff)
	}
	for _, h := range rep.Hours {
		c := h.Populations["GB users"]
		if c.Tried != 60 || c.Sent != 30 || c.Refused != 30 {
			t.Errorf("hour %d: tried %d, sent %d, refused %d; want 60, 30, 30", h.Hour, c.Tried, c.Sent, c.Refused)
		}
	}
}

// TestRunIsRepeatable: one scenario and seed, one report, to the byte.
func TestRunIsRepeatable(t *testing.T) {
	var out [2]bytes.Buffer
	for i := range out {
		if err := run(t, "small.yaml").WriteJSON(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Errorf("two runs of one seed differ:\n%s\n%s", out[0].String(), out[1].String())
	}
	var rep struct {
		Populations map[string]Counts
	}
	if err := json.Unmarshal(out[0].Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	gb, ng := rep.Populations["GB users"], rep.Populations["NG attacker"]
	// The campaign hour is 18:00, the curve's 0.9 of a peak of 120; the
	// attacker sends 4 a minute for 40 minutes.
	if gb.Tried != 108 || ng.Tried != 160 {
		t.Errorf("tried: GB users %d, NG attacker %d; want 108 and 160", gb.Tried, ng.Tried)
	}
	if ng.Verified != 0 || gb.Verified == 0 || gb.Verified > gb.Sent {
		t.Errorf("verified: GB users %d of %d sent, NG attacker %d; want most of GB's and none of NG's", gb.Verified, gb.Sent, ng.Verified)
	}
	if ng.Cost != float64(ng.Sent)*0.5 {
		t.Errorf("NG attacker's cost: got %v for %d SMS, want the scenario's price 0.5 each", ng.Cost, ng.Sent)
	}
}

// TestReportJSONShape holds the JSON's keys to what docs/simulate.md
// documents.
func TestReportJSONShape(t *testing.T) {
	rep := shared(t, "budget-scenario.yaml")
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	counts := []string{"challenged", "cost", "refused", "refused_by_code", "returning", "returning_challenged",
		"returning_refused", "sent", "tried", "verified"}
	if got := sortedKeys(doc); !slices.Equal(got, []string{"hours", "populations"}) {
		t.Errorf("top keys: got %v", got)
	}
	pop := doc["populations"].(map[string]any)["GB users"].(map[string]any)
	if got := sortedKeys(pop); !slices.Equal(got, counts) {
		t.Errorf("populations.<name> keys: got %v, want %v", got, counts)
	}
	hours := doc["hours"].([]any)
	if len(hours) != 2 {
		t.Fatalf("hours: got %d, want 2", len(hours))
	}
	h := hours[1].(map[string]any)
	if got := sortedKeys(h); !slices.Equal(got, []string{"hour", "populations", "start"}) {
		t.Errorf("hours[1] keys: got %v", got)
	}
	if h["hour"] != 1.0 || h["start"] != "2026-03-02T09:00:00Z" {
		t.Errorf("hours[1]: hour %v start %v; want 1, 2026-03-02T09:00:00Z", h["hour"], h["start"])
	}
	if got := sortedKeys(h["populations"].(map[string]any)["GB users"].(map[string]any)); !slices.Equal(got, counts) {
		t.Errorf("hours[1].populations.<name> keys: got %v, want %v", got, counts)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "budget_exhausted 60") {
		t.Errorf("table: no total row with budget_exhausted 60:\n%s", table.String())
	}
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestReturningUsersNeverChallenged: while attackers push two countries'
// new numbers into challenges, the tries of returning users (numbers that
// verified in the history) and imported ones are never challenged or
// refused; their populations' new numbers are, so the rules were acting.
func TestReturningUsersNeverChallenged(t *testing.T) {
	rep := run(t, "returning.yaml")
	for _, name := range []string{"GB users", "NG users"} {
		c := rep.Populations[name]
		if c.Returning == 0 || c.ReturningChallenged != 0 || c.ReturningRefused != 0 {
			t.Errorf("%s: %d returning tries, %d challenged, %d refused; want some, none challenged or refused",
				name, c.Returning, c.ReturningChallenged, c.ReturningRefused)
		}
		if c.Challenged == 0 {
			t.Errorf("%s: no try challenged: the attack did not reach the automatic rules", name)
		}
	}
	for _, name := range []string{"GB attacker", "NG attacker"} {
		if c := rep.Populations[name]; c.Challenged == 0 || c.Returning != 0 {
			t.Errorf("%s: %d challenged, %d returning; want challenged, never returning", name, c.Challenged, c.Returning)
		}
	}
}

// TestSurgeReturnsToItsCountrysUsers: a surge population with no history
// of its own (returning_to: IN users) sends its returning tries to the
// numbers IN users verified in the history; they count as returning, and
// no automatic rule challenges or refuses them, while the surge's new
// numbers meet the challenges the attacker brings.
func TestSurgeReturnsToItsCountrysUsers(t *testing.T) {
	rep := run(t, "surge.yaml")
	c := rep.Populations["IN surge"]
	// It asks for 60 %: of 54 tries, those that find a user who has not
	// tried today return, the rest go to new numbers. The country is 36
	// hours old: its day-old hours hold too few sends to warm it
	// (cold_warm_conversion), so its new users of the history met the cold
	// room's challenges, and those who did not solve them are not users to
	// return to: 17 of 54 return (a third or more before the rule). On a
	// machine so loaded that the embedded Redis times out
	// (store_unavailable in the history) the users differ again. Without
	// returning_to none would.
	if c.Returning < c.Tried/4 || c.ReturningChallenged != 0 || c.ReturningRefused != 0 {
		t.Errorf("IN surge: %d of %d tries returning, %d challenged, %d refused; want a quarter at least, none challenged or refused",
			c.Returning, c.Tried, c.ReturningChallenged, c.ReturningRefused)
	}
	if c.Challenged == 0 {
		t.Errorf("IN surge: no try challenged: the attack did not reach its new numbers")
	}
	if u := rep.Populations["IN users"]; u.ReturningChallenged != 0 || u.ReturningRefused != 0 {
		t.Errorf("IN users: %d returning tries challenged, %d refused; want none", u.ReturningChallenged, u.ReturningRefused)
	}
}

// TestSharedPoolReturnsOnceADay: two populations sharing one pool of
// users (returning_to) return to the same numbers, and a user who
// returned through one does not return through the other the same day;
// the numbers either verifies join the pool.
func TestSharedPoolReturnsOnceADay(t *testing.T) {
	s := &Scenario{Seed: 1, Populations: []Population{
		{Name: "GB users", Country: "GB", Returning: 1},
		{Name: "GB surge", Country: "GB", Returning: 1, ReturningTo: "GB users"},
	}}
	users, err := newPopState(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	surge, err := newPopState(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	surge.pool = users.pool
	const u = "+447700900001"
	users.pool.remember(u)
	t0 := s.Start.Add(48 * time.Hour)
	if phone, found := surge.pick(true, t0); phone != u || !found {
		t.Fatalf("the surge's returning try: got %s (found %v), want the users' %s", phone, found, u)
	}
	if phone, found := users.pick(true, t0.Add(time.Hour)); phone == u || found {
		t.Errorf("an hour later through the other population: got %s (found %v), want a new number", phone, found)
	}
	if phone, found := users.pick(true, t0.Add(returningEvery)); phone != u || !found {
		t.Errorf("a day later: got %s (found %v), want %s again", phone, found, u)
	}
	const v = "+447700900002"
	surge.pool.remember(v)
	if !users.pool.known[v] {
		t.Errorf("a number the surge verified is not among the users' numbers")
	}
}

// TestFallbackUsers: with the policy's fallback channel, the users who
// take it get their codes by it while an attacker holds the country's
// SMS: fewer are left without a code than in the same run without the
// fallback, their codes by it are counted apart (not in sent, nor
// cost) and verified, and the attacker's figures are its SMS alone.
func TestFallbackUsers(t *testing.T) {
	with, without := shared(t, "fallback.yaml"), shared(t, "fallback-none.yaml")
	users, attacker := with.Populations["GB users"], with.Populations["GB attacker"]
	if users.FallbackSends == 0 || users.Verified <= users.Sent {
		t.Errorf("users: %d codes by the fallback, %d verified of %d SMS; want some by the fallback, verified beyond the SMS",
			users.FallbackSends, users.Verified, users.Sent)
	}
	if attacker.FallbackSends != 0 || with.Summary.AttackersSent != attacker.Sent || with.Summary.AttackersFallbackSends != 0 {
		t.Errorf("attacker: %d by the fallback, summary %d SMS of its %d; want none by the fallback, its SMS alone",
			attacker.FallbackSends, with.Summary.AttackersSent, attacker.Sent)
	}
	if got, want := with.Summary.UsersWithoutCode, users.Tried-users.Sent-users.FallbackSends; got != want {
		t.Errorf("users without a code: %d, want tried - sent - fallback = %d", got, want)
	}
	if with.Summary.UsersFallbackSends != users.FallbackSends || users.Cost != cents(float64(users.Sent)*DefaultPrices["GB"]) {
		t.Errorf("summary's fallback %d, cost %v; want %d, the SMS's alone", with.Summary.UsersFallbackSends, users.Cost, users.FallbackSends)
	}
	for name, c := range without.Populations {
		if c.FallbackSends != 0 {
			t.Errorf("%s without the policy's fallback: %d codes by it, want none", name, c.FallbackSends)
		}
	}
	if with.Summary.UsersWithoutCode >= without.Summary.UsersWithoutCode {
		t.Errorf("users without a code: %d with the fallback, %d without; want fewer with it",
			with.Summary.UsersWithoutCode, without.Summary.UsersWithoutCode)
	}
}

// TestServicesCountApart: a bot on service A's Verify routes
// (testdata/services.yaml) leaves service B's users and the default
// service's with exactly what they get without it
// (services-quiet.yaml), while A's own users meet more challenges; the
// report's service rows sum each service's populations.
func TestServicesCountApart(t *testing.T) {
	attacked, quiet := shared(t, "services.yaml"), shared(t, "services-quiet.yaml")
	for _, name := range []string{"B users", "app users"} {
		if diff := cmp.Diff(quiet.Populations[name], attacked.Populations[name]); diff != "" {
			t.Errorf("%s: A's bot changed what they got (-quiet +attacked):\n%s", name, diff)
		}
	}
	a, aQuiet := attacked.Populations["A users"], quiet.Populations["A users"]
	if a.Challenged <= aQuiet.Challenged || attacked.Populations["A bot"].Sent >= attacked.Populations["A bot"].Tried {
		t.Errorf("A's users challenged %d (quiet %d), A's bot sent %d of %d: want the bot held in A's rooms and A's users challenged more",
			a.Challenged, aQuiet.Challenged, attacked.Populations["A bot"].Sent, attacked.Populations["A bot"].Tried)
	}
	rows := map[string][]string{"VA0000000000000000000000000000000a": {"A users", "A bot"},
		"VA0000000000000000000000000000000b": {"B users"}, defaultServiceRow: {"app users"}}
	if len(attacked.Services) != len(rows) {
		t.Errorf("service rows %v, want %d", slices.Sorted(maps.Keys(attacked.Services)), len(rows))
	}
	for svc, pops := range rows {
		var tried, sent int
		for _, p := range pops {
			tried, sent = tried+attacked.Populations[p].Tried, sent+attacked.Populations[p].Sent
		}
		if got := attacked.Services[svc]; got == nil || got.Tried != tried || got.Sent != sent {
			t.Errorf("service %s's row %+v, want tried %d and sent %d, its populations'", svc, got, tried, sent)
		}
	}
}
