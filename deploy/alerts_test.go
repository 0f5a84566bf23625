// Package deploy_test checks the example alert rules and Grafana dashboard
// shipped in deploy/ against the metrics otpguard really registers.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
)

// registeredNames is the names of registeredSeries.
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	names, _ := registeredSeries(t)
	return names
}

// registeredSeries boots otpguard as the binary does (app.New: embedded
// Redis, SQLite), with the policy a production deployment has (a spend
// budget, the countries it serves: their series exist from start), scrapes
// /metrics once, before any request, and returns every name a PromQL
// selector can use (a histogram's _bucket, _sum and _count, a summary's
// _sum and _count beside its own name) and, by name, the label pairs
// (`label="value"`) its series carry.
func registeredSeries(t *testing.T) (names map[string]bool, pairs map[string]map[string]bool) {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		if k == "OTPGUARD_DATA_DIR" {
			return t.TempDir()
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.LogLevel = "error"
	cfg.Policies.OTP.Budget = guard.Budget{PerHour: 1000, PerDay: 10000}
	cfg.Policies.OTP.AllowedCountries = []string{"IN", "GB", "US"}
	a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard))
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	names, pairs = map[string]bool{}, map[string]map[string]bool{}
	for name, f := range families {
		var selectable []string
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			selectable = []string{name + "_bucket", name + "_sum", name + "_count"}
		case dto.MetricType_SUMMARY:
			selectable = []string{name, name + "_sum", name + "_count"}
		default:
			selectable = []string{name}
		}
		for _, n := range selectable {
			names[n], pairs[n] = true, map[string]bool{}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					pairs[n][fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())] = true
				}
			}
		}
	}
	return names, pairs
}

// matcher is one `label="value"` filter of a selector that names its
// metric.
type matcher struct{ metric, pair string }

// equalityMatchers parses expr and returns its selectors' `label="value"`
// filters (not regexps, not negations, which match whether or not the
// series exists).
func equalityMatchers(expr string) ([]matcher, error) {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return nil, err
	}
	var out []matcher
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		me, ok := x.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, group := range me.LabelFilterss {
			name := ""
			for _, f := range group {
				if f.Label == "__name__" && !f.IsRegexp && !f.IsNegative {
					name = f.Value
				}
			}
			for _, f := range group {
				if name != "" && f.Label != "__name__" && !f.IsRegexp && !f.IsNegative {
					out = append(out, matcher{name, fmt.Sprintf("%s=%q", f.Label, f.Value)})
				}
			}
		}
	})
	return out, nil
}

// metricNames parses expr as PromQL (MetricsQL, a superset) and returns
// the metric names its selectors name.
func metricNames(expr string) ([]string, error) {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		me, ok := x.(*metricsql.MetricExpr)
		if !ok {
			return
		}
		for _, group := range me.LabelFilterss {
			for _, f := range group {
				if f.Label == "__name__" && !f.IsRegexp && !f.IsNegative {
					out = append(out, f.Value)
				}
			}
		}
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("names no metric")
	}
	return out, nil
}

// ruleFile is Prometheus's rule file format (rulefmt), strictly: an
// unknown field is an error, as promtool check rules makes it.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestAlertRulesUseRegisteredMetrics(t *testing.T) {
	names, pairs := registeredSeries(t)
	b, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	alertName := regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	seen := map[string]bool{}
	var alerts []string
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a group needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			what := g.Name + "/" + r.Alert
			if r.Alert == "" || r.Record != "" || !alertName.MatchString(r.Alert) || seen[r.Alert] {
				t.Errorf("%s: each rule is one alert with a unique, valid name", what)
			}
			seen[r.Alert] = true
			alerts = append(alerts, r.Alert)
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", what, err)
				}
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: wants a severity label and a summary", what)
			}
			used, err := metricNames(r.Expr)
			if err != nil {
				t.Errorf("%s: expr %q: %v", what, r.Expr, err)
				continue
			}
			for _, n := range used {
				if !names[n] {
					t.Errorf("%s: uses %s, which otpguard does not register (at start-up)", what, n)
				}
			}
			// A counter's series that appears only with its first event
			// makes increase() miss that event: the rule would not fire
			// on the first failure.
			ms, err := equalityMatchers(r.Expr)
			if err != nil {
				t.Errorf("%s: expr %q: %v", what, r.Expr, err)
			}
			for _, m := range ms {
				if names[m.metric] && !pairs[m.metric][m.pair] {
					t.Errorf("%s: selects %s{%s}, a series otpguard does not create at start-up", what, m.metric, m.pair)
				}
			}
		}
	}
	// What the issue asks the examples to cover.
	for _, want := range []string{"OtpguardSMSBudgetNearlySpent", "OtpguardConversionAlert", "OtpguardRedisBreakerOpen", "OtpguardShedding",
		// docs/changing-limits.md tells operators to alert on a failed policy reload.
		"OtpguardPolicyReloadFailed"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yaml has no %s (has %v)", want, alerts)
		}
	}
}

// grafanaVars are Grafana's own variables, replaced as Grafana would
// before the query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func TestGrafanaDashboardUsesRegisteredMetrics(t *testing.T) {
	names := registeredNames(t)
	b, err := os.ReadFile("grafana/otpguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("otpguard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("otpguard.json: wants a uid, a title and panels")
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			ns, err := metricNames(grafanaVars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q: expr %q: %v", p.Title, tg.Expr, err)
				continue
			}
			for _, n := range ns {
				used[n] = true
				if !names[n] {
					t.Errorf("panel %q: uses %s, which otpguard does not register (at start-up)", p.Title, n)
				}
			}
		}
	}
	var list []string
	for n := range used {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("the dashboard reads %d metrics: %s", len(list), strings.Join(list, ", "))
}

// TestMetricNamesFindsWhatAGrepWouldMiss holds the parser to what a string
// grep gets wrong: a name in a label value or a string is not a metric, a
// selector by {__name__=...} is.
func TestMetricNamesFindsWhatAGrepWouldMiss(t *testing.T) {
	got, err := metricNames(`sum(rate({__name__="otpguard_a_total"}[5m])) / on() group_left label_replace(otpguard_b, "x", "otpguard_c", "", "")`)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if want := []string{"otpguard_a_total", "otpguard_b"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
	if _, err := metricNames(`sum(rate(otpguard_a_total[5m]`); err == nil {
		t.Errorf("metricNames of an unbalanced expression: no error")
	}
}
