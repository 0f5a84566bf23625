package deploy_test

import (
	"os"
	"os/exec"
	"sort"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// promtool finds Prometheus's own rule checker (Debian's prometheus
// package brings it; CI installs it), or skips: a test of the shipped rules
// by the real tool, not by a PromQL superset.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		redistest.Unavailable(t, "promtool not on PATH (apt-get install prometheus)")
	}
	return p
}

func TestAlertRulesPassPromtoolCheck(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestAlertRulesFireInPromtoolTests(t *testing.T) {
	cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yaml")
	cmd.Dir = "prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertHasAFiringCase holds alerts_test.yaml to the rules: an
// alert added without a case that makes it fire is untested.
func TestEveryAlertHasAFiringCase(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	for file, v := range map[string]any{"prometheus/alerts.yaml": &rules, "prometheus/alerts_test.yaml": &tests} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	var missing []string
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] {
				missing = append(missing, r.Alert)
			}
		}
	}
	sort.Strings(missing)
	if n == 0 || len(missing) > 0 {
		t.Errorf("alerts with no promtool case that makes them fire: %v (of %d rules)", missing, n)
	}
}
