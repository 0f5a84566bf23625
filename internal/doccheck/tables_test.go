package doccheck

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
)

// reference is docs/reference.md.
func reference(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tableRows returns the cells of the rows of the first table under the
// "## <section>" heading of md, header and rule left out, with the
// backquotes of each cell removed.
func tableRows(t *testing.T, md, section string) [][]string {
	t.Helper()
	_, after, ok := strings.Cut(md, "\n## "+section+"\n")
	if !ok {
		t.Fatalf("docs/reference.md: no section %q", section)
	}
	if end := strings.Index(after, "\n## "); end >= 0 {
		after = after[:end]
	}
	var rows [][]string
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		if !inTable { // the header
			inTable = true
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		for i, c := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(c, "`", ""))
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("docs/reference.md, %s: no table", section)
	}
	return rows
}

// sorted returns the keys of set, sorted.
func sorted(set map[string]bool) []string {
	var out []string
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// column returns the first cell of each row as a set, reporting repeats.
func column(t *testing.T, rows [][]string, what string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for _, r := range rows {
		if set[r[0]] {
			t.Errorf("%s %q is listed twice", what, r[0])
		}
		set[r[0]] = true
	}
	return set
}

// TestRoutesTable: the routes table lists exactly the operations (method
// and path) of api/openapi.yaml, which a test in internal/httpapi holds to
// the routes the server registers.
func TestRoutesTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete", "head", "options":
				want[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	got := column(t, tableRows(t, reference(t), "Routes"), "route")
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("docs/reference.md's routes against api/openapi.yaml (-openapi +docs):\n%s", diff)
	}
}

// goFiles parses the non-test Go files under dir (recursively).
func goFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	var files []*ast.File
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir // no package: the go tool skips it too (twilio-node lives there)
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestProblemCodesTable: the problem codes table lists exactly the codes
// package problem declares (constants of type Code), each with the status
// httpx's statusOf gives it.
func TestProblemCodesTable(t *testing.T) {
	codes := map[string]string{} // constant name -> code
	for _, f := range goFiles(t, filepath.Join(root, "internal", "problem")) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || vs.Type == nil || len(vs.Values) != len(vs.Names) {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				return true
			}
			for i, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					codes[vs.Names[i].Name], _ = strconv.Unquote(lit.Value)
				}
			}
			return true
		})
	}
	statuses := statusOf(t, codes)
	want := map[string]bool{}
	for _, c := range codes {
		want[c] = true
	}
	rows := tableRows(t, reference(t), "Problem codes")
	got := column(t, rows, "code")
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("docs/reference.md's problem codes against the problem.Code constants (-code +docs):\n%s", diff)
	}
	for _, r := range rows {
		if st, ok := statuses[r[0]]; ok && len(r) > 1 && r[1] != strconv.Itoa(st) {
			t.Errorf("docs/reference.md: %s is %s, httpx's statusOf says %d", r[0], r[1], st)
		}
	}
}

// httpStatus are the net/http constants statusOf uses, by name.
var httpStatus = map[string]int{
	"StatusBadRequest": 400, "StatusUnauthorized": 401, "StatusForbidden": 403,
	"StatusNotFound": 404, "StatusMethodNotAllowed": 405, "StatusConflict": 409,
	"StatusRequestEntityTooLarge": 413, "StatusUnprocessableEntity": 422,
	"StatusPreconditionRequired": 428,
	"StatusTooManyRequests":      429, "StatusInternalServerError": 500,
	"StatusBadGateway": 502, "StatusServiceUnavailable": 503,
}

// statusOf reads the one table from codes to statuses (httpx's
// statusOf) from the source, by code.
func statusOf(t *testing.T, codes map[string]string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, f := range goFiles(t, filepath.Join(root, "internal", "httpx")) {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "statusOf" || len(vs.Values) != 1 {
				return true
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			for _, e := range lit.Elts {
				kv := e.(*ast.KeyValueExpr)
				k, v := kv.Key.(*ast.SelectorExpr), kv.Value.(*ast.SelectorExpr)
				st, ok := httpStatus[v.Sel.Name]
				if !ok {
					t.Errorf("statusOf: %s: add %s to httpStatus", k.Sel.Name, v.Sel.Name)
				}
				out[codes[k.Sel.Name]] = st
			}
			return false
		})
	}
	if len(out) == 0 {
		t.Fatal("no statusOf table found in internal/httpapi")
	}
	return out
}

var metricNameRE = regexp.MustCompile(`^otpguard_[a-z0-9_]+$`)

// TestMetricsTable: the metrics table lists exactly otpguard's metrics:
// every Name of a prometheus ...Opts literal in the code, and every
// otpguard_ family a fresh instance serves on /metrics (so a name built
// another way is not missed).
func TestMetricsTable(t *testing.T) {
	want := map[string]bool{}
	for _, f := range goFiles(t, filepath.Join(root, "internal")) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
				return true
			}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if k, _ := kv.Key.(*ast.Ident); !ok || k == nil || k.Name != "Name" {
					continue
				}
				if s, ok := kv.Value.(*ast.BasicLit); ok && s.Kind == token.STRING {
					name, _ := strconv.Unquote(s.Value)
					want[name] = true
				}
			}
			return true
		})
	}
	for name := range served(t) {
		want[name] = true
	}
	for name := range want {
		if !metricNameRE.MatchString(name) {
			t.Errorf("metric %q: not otpguard_ and snake case", name)
		}
	}
	got := column(t, tableRows(t, reference(t), "Metrics"), "metric")
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("docs/reference.md's metrics against the code (-code +docs):\n%s", diff)
	}
}

// served boots otpguard as the binary does (embedded Redis, SQLite, a
// spend budget and a hot-key policy, so that their metrics exist) and
// returns the otpguard_ families of one scrape.
func served(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`otp:
  budget: {per_hour: 1000, per_day: 10000}
limits:
  hot: {algorithm: token_bucket, capacity: 100, refill_per_second: 10, mode: sync}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"OTPGUARD_DATA_DIR": dir, "OTPGUARD_CONFIG": policy, "OTPGUARD_LOG_LEVEL": "error"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
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
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]bool{}
	for name := range families {
		if strings.HasPrefix(name, "otpguard_") {
			out[name] = true
		}
	}
	return out
}
