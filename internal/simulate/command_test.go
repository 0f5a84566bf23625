package simulate

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandWritesHTML runs `otpguard simulate --html FILE SCENARIO`
// (the flag after the scenario too): the page in the file, with a chart
// of the campaign's hour, and the table on stdout.
func TestCommandWritesHTML(t *testing.T) {
	dir := t.TempDir()
	scenario := filepath.Join(dir, "s.yaml")
	err := os.WriteFile(scenario, []byte(`start: 2026-03-02T12:00:00Z
duration: 20m
populations:
  - {name: IN users, country: IN, per_minute: 1, verify: 1}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.html"), filepath.Join(dir, "b.html")
	for _, args := range [][]string{{"--html", a, scenario}, {scenario, "--html", b}} {
		var stdout bytes.Buffer
		if err := command(t.Context(), args, &stdout, io.Discard); err != nil {
			t.Fatalf("simulate %v: %v", args, err)
		}
		if !strings.HasPrefix(stdout.String(), "campaign: 1 hour from 2026-03-02 12:00 UTC") {
			t.Errorf("simulate %v: stdout, want the table, got:\n%s", args, stdout.String())
		}
	}
	for _, name := range []string{a, b} {
		content, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		page := string(content)
		if !strings.HasPrefix(page, "<!doctype html>") || strings.Count(page, `<g class="hour"`) != 1 ||
			!strings.Contains(page, "otpguard simulate: s.yaml") {
			t.Errorf("%s: want the page of s.yaml with one hour's chart, got:\n%s", name, page)
		}
	}
}
