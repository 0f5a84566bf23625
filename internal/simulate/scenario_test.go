package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const validScenario = `
start: 2026-03-02T00:00:00Z
history: 24h
duration: 2h
instances: 3
seed: 9
prices: {GB: 0.04}
populations:
  - name: GB users
    country: GB
    peak_per_hour: 100
    returning: 0.6
    verify: 0.85
  - name: attacker
    country: "001"
    per_minute: 2
    from: 30m
    until: 90m
    rotate_ip: true
    prefixes: ["+8816", "+870"]
`

func TestParseValid(t *testing.T) {
	s, err := Parse([]byte(validScenario))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := s.Start, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("start: got %v, want %v", got, want)
	}
	if time.Duration(s.History) != 24*time.Hour || s.Instances != 3 || s.Seed != 9 || len(s.Populations) != 2 {
		t.Errorf("got history %v, instances %d, seed %d, %d populations; want 24h, 3, 9, 2",
			time.Duration(s.History), s.Instances, s.Seed, len(s.Populations))
	}
	a := s.Populations[1]
	if from, until := a.bounds(2 * time.Hour); from != 30*time.Minute || until != 90*time.Minute || a.standing() {
		t.Errorf("attacker: got from %v until %v standing %v; want 30m, 90m, false", from, until, a.standing())
	}
	if !s.Populations[0].standing() {
		t.Errorf("a population without from must run in the history")
	}
	if got := s.price("GB"); got != 0.04 {
		t.Errorf("price of GB: got %v, want the scenario's 0.04", got)
	}
	if got := s.price("IN"); got != DefaultPrices["IN"] {
		t.Errorf("price of IN: got %v, want the default %v", got, DefaultPrices["IN"])
	}
}

func TestParseDefaults(t *testing.T) {
	s, err := Parse([]byte("start: 2026-03-02T00:00:00Z\nduration: 1h\npopulations: [{name: a, country: IN, per_minute: 1}]\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.Instances != 2 || s.Seed != 1 || s.History != 0 {
		t.Errorf("got instances %d, seed %d, history %v; want 2, 1, 0", s.Instances, s.Seed, time.Duration(s.History))
	}
}

// TestParseRefuses: each mistake is refused with the path of the field
// it is in.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown top field", "seed: 9", "sed: 9", "sed (line"},
		{"unknown population field", "    verify: 0.85", "    verfy: 0.85", "populations[0].verfy (line"},
		{"bad duration", "history: 24h", "history: a day", "history (line"},
		{"bad start", "start: 2026-03-02T00:00:00Z", "start: monday", "start (line"},
		{"bad number", "    returning: 0.6", "    returning: most", "populations[0].returning (line"},
		{"bad bool", "    rotate_ip: true", "    rotate_ip: yes please", "populations[1].rotate_ip (line"},
		{"share above 1", "    verify: 0.85", "    verify: 85", "populations[0].verify: 85 is not a share"},
		{"negative share", "    returning: 0.6", "    returning: -0.1", "populations[0].returning"},
		{"fallback above 1", "    verify: 0.85", "    verify: 0.85\n    fallback: 2", "populations[0].fallback: 2 is not a share"},
		{"no rate", "    peak_per_hour: 100\n", "", "populations[0].peak_per_hour, per_minute"},
		{"two rates", "    per_minute: 2", "    per_minute: 2\n    peak_per_hour: 5", "populations[1].peak_per_hour, per_minute"},
		{"unknown country", "country: GB", "country: XY", "populations[0].country"},
		{"001 without prefixes", `    prefixes: ["+8816", "+870"]`, "", "populations[1].prefixes: required"},
		{"bad prefix", `"+870"`, `"870"`, "populations[1].prefixes[1]"},
		{"prefix of no number", `"+870"`, `"+999"`, "populations[1].prefixes[1]: +999 makes no valid number"},
		{"until before from", "until: 90m", "until: 20m", "populations[1].until"},
		{"until past the end", "until: 90m", "until: 3h", "populations[1].until"},
		{"from past the end", "from: 30m", "from: 2h", "populations[1].from"},
		{"no duration", "duration: 2h\n", "", "duration: required"},
		{"too many instances", "instances: 3", "instances: 40", "instances: 40"},
		{"bad price", "GB: 0.04", "GB: -1", "prices.GB"},
		{"price of no country", "GB: 0.04", "XX: 0.04", "prices.XX"},
		{"duplicate name", "name: attacker", "name: GB users", `populations[1].name: "GB users" is used twice`},
		{"bad service", "    verify: 0.85", "    verify: 0.85\n    service: VA12", `populations[0].service: "VA12" is not a Verify service SID`},
		{"service with account", "    verify: 0.85", "    verify: 0.85\n    account: 0.5\n    service: VA0000000000000000000000000000000a",
			"populations[0].account: the Verify routes have no account flag"},
		{"service imported", "    verify: 0.85", "    verify: 0.85\n    imported: true\n    service: VA0000000000000000000000000000000a",
			"populations[0].imported: imports are the default service's"},
		{"population not a mapping", "  - name: GB users\n", "  - just a name\n  - name: GB users\n", "populations[0] (line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(validScenario, tc.from, tc.to, 1)
			if doc == validScenario {
				t.Fatalf("the case changes nothing: %q not found", tc.from)
			}
			_, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("Parse: no error, want one naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: got %q, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestLoadPolicyRelativeToScenario(t *testing.T) {
	s, err := Load(filepath.Join("testdata", "budget-scenario.yaml"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want := filepath.Join("testdata", "budget.yaml"); s.Policy != want {
		t.Errorf("policy: got %q, want %q", s.Policy, want)
	}
	dir := t.TempDir()
	b, _ := os.ReadFile(filepath.Join("testdata", "budget-scenario.yaml"))
	if err := os.WriteFile(filepath.Join(dir, "s.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "s.yaml")); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Errorf("Load with the policy file missing: got %v, want an error naming the policy", err)
	}
}

const surgeScenario = `
start: 2026-03-09T18:00:00Z
history: 48h
duration: 2h
populations:
  - {name: IN users, country: IN, peak_per_hour: 100, returning: 0.6, verify: 0.85}
  - {name: IN surge, country: IN, peak_per_hour: 200, from: 0s, returning: 0.6, returning_to: IN users, verify: 0.85}
  - {name: GB users, country: GB, peak_per_hour: 40, returning: 0.6, verify: 0.85}
  - {name: IN attacker, country: IN, per_minute: 5, from: 0s, rotate_ip: true}
`

func TestParseReturningTo(t *testing.T) {
	s, err := Parse([]byte(surgeScenario))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := s.owner(1); got != 0 {
		t.Errorf("the surge's users: got population %d, want 0 (IN users)", got)
	}
	if got := s.owner(2); got != 2 {
		t.Errorf("GB users' users: got population %d, want its own, 2", got)
	}
	// Imported users may return at once, whatever the history.
	imported := strings.Replace(surgeScenario, "history: 48h", "history: 0s", 1)
	imported = strings.Replace(imported, "returning: 0.6, verify", "returning: 0.6, imported: true, verify", 1)
	imported = strings.Replace(imported, "{name: GB users, country: GB, peak_per_hour: 40, returning: 0.6", "{name: GB users, country: GB, peak_per_hour: 40, returning: 0", 1)
	if _, err := Parse([]byte(imported)); err != nil {
		t.Errorf("the surge returning to an imported population without history: %v", err)
	}
}

// TestParseRefusesReturning: a returning_to that names no population,
// itself, one of another country or one that returns elsewhere, and a
// population that asks for returning users it cannot have in the run,
// are refused with the field's path.
func TestParseRefusesReturning(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown name", "returning_to: IN users", "returning_to: IN user", `populations[1].returning_to: "IN user" is not the name of a population`},
		{"itself", "returning_to: IN users", "returning_to: IN surge", `populations[1].returning_to: "IN surge" is this population`},
		{"other country", "returning_to: IN users", "returning_to: GB users", `populations[1].returning_to: "GB users" is of country GB, this population of IN`},
		{"a chain", "{name: IN attacker, country: IN, per_minute: 5, from: 0s", "{name: IN attacker, country: IN, per_minute: 5, from: 0s, returning: 0.1, returning_to: IN surge",
			`populations[3].returning_to: "IN surge" returns to "IN users" itself; name the population that owns the users, "IN users"`},
		{"no returning share", "returning: 0.6, returning_to", "returning: 0, returning_to", "populations[1].returning_to: set, but returning is 0"},
		{"imported too", "returning_to: IN users,", "returning_to: IN users, imported: true,", `populations[1].imported: the users are "IN users"'s`},
		{"no users: campaign only", "returning: 0.6, returning_to: IN users,", "returning: 0.6,", "populations[1].returning: 0.6, but no user can return in this run"},
		{"no users: the owner has no history", "history: 48h", "history: 0s", "populations[1].returning: 0.6, but no user can return in this run"},
		{"no users: history under a day", "history: 48h", "history: 21h", "populations[0].returning: 0.6, but no user can return in this run"},
		{"no users: nobody verifies", "returning: 0.6, verify: 0.85}\n  - {name: IN surge", "returning: 0.6}\n  - {name: IN surge",
			"populations[0].returning: 0.6, but no user can return in this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(surgeScenario, tc.from, tc.to, 1)
			if doc == surgeScenario {
				t.Fatalf("the case changes nothing: %q not found", tc.from)
			}
			_, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("Parse: no error, want one naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: got %q, want it to name %q", err, tc.want)
			}
		})
	}
}

// TestShippedScenariosLoad: every scenario docs/abuse.md reports on
// loads, so that a change of the format cannot leave one behind.
func TestShippedScenariosLoad(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "scenarios", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios in docs/scenarios: %v", err)
	}
	for _, p := range paths {
		if _, err := Load(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}
