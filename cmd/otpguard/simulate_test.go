package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateCommand runs `otpguard simulate --json FILE SCENARIO` on a
// half-hour scenario: the table on stdout, the report in the file.
func TestSimulateCommand(t *testing.T) {
	dir := t.TempDir()
	scenario := filepath.Join(dir, "s.yaml")
	err := os.WriteFile(scenario, []byte(`start: 2026-03-02T12:00:00Z
duration: 30m
populations:
  - {name: IN users, country: IN, per_minute: 2, verify: 1}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.json")
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"otpguard", "simulate", scenario, "--json", out}, func(string) string { return "" }, &stdout); err != nil {
		t.Fatalf("simulate: %v", err)
	}
	if !strings.Contains(stdout.String(), "IN users") || !strings.Contains(stdout.String(), "total") {
		t.Errorf("stdout: want the table, got:\n%s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Populations map[string]struct{ Tried, Sent int }
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("the JSON file: %v\n%s", err, b)
	}
	// What is sent is the policy's business (internal/simulate tests it).
	if got := rep.Populations["IN users"]; got.Tried != 60 || got.Sent == 0 {
		t.Errorf("IN users: tried %d, sent %d; want 60 tries, some sent", got.Tried, got.Sent)
	}
	if err := run(t.Context(), []string{"otpguard", "simulate"}, func(string) string { return "" }, &stdout); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("simulate without a scenario: got %v, want the usage", err)
	}
}
