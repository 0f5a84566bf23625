package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// logs are the documents that are histories by design: the changelog and
// the dated log of benchmark runs. Every other document says what is.
var logs = map[string]bool{
	"CHANGELOG.md":           true,
	"docs/benchmarks-log.md": true,
}

// historyRules are what a document that describes the present must not
// hold: the tracker's numbers and the names of the branches work was done
// on. Both mean nothing to a reader of a release, and both age: "since
// issue 26" or "branch i26-alloc" describe how the code got here, which is
// the changelog's and the commit messages' business. A comparison names
// the release it compares with (v0.1.0), not the tracker.
var historyRules = []struct {
	name string
	re   *regexp.Regexp
}{
	// "issue 27", "issue #27", "issues 11 and 26", and a heading's
	// anchor made of one ("...-issue-16").
	{"an issue number", regexp.MustCompile(`(?i)\bissues?[\s-]+#?\d+`)},
	// "#27" standing alone (not "#12-releases", an anchor).
	{"an issue number", regexp.MustCompile(`(?:^|[\s(\[,;])#\d+(?:[^\w-]|$)`)},
	{"a pull request number", regexp.MustCompile(`(?i)\b(?:PR|pull request)\s+#?\d+\b`)},
	// The branches work was done on: i26-alloc, i22-trust-2, ...
	{"a branch name", regexp.MustCompile(`\bi\d+-[a-z0-9]+(?:-[a-z0-9]+)*\b`)},
	// This round's branches: house-docs, house-store, ...
	{"a branch name", regexp.MustCompile(`\bhouse-(?:config|docs|fallback|limit|otp|store|walk)\b`)},
	// The usual shapes of a branch's name.
	{"a branch name", regexp.MustCompile(`\b(?:feature|fix|hotfix|bugfix|wip)[/-][a-z0-9][\w.-]*`)},
	// "branch foo-bar", "on branch `x/y`".
	{"a branch name", regexp.MustCompile("(?i)\\bbranch(?:es)?\\s+`?[a-z0-9]+[-/][\\w./-]*")},
	// A measurement or state named after the main branch at a commit.
	{"a branch name", regexp.MustCompile("\\bmain\\s+`[0-9a-f]{7,40}`")},
}

// presentDocs are the documents held to historyRules: the README, every
// Markdown file under docs/, the HTTP contract, the shipped scenarios and
// the deployment files a reader copies (their comments are docs too).
func presentDocs(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{
		"README.md",
		"api/openapi.yaml",
		"docs/scenarios/*.yaml",
		"deploy/compose.yaml",
		"deploy/Containerfile",
		"deploy/systemd/*",
		"deploy/prometheus/*.yaml",
	} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if !logs[filepath.ToSlash(rel)] {
			out = append(out, f)
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d documents to check, want the README, docs/ and the rest", len(out))
	}
	return out
}

// historyIn returns "line N: what (text)" for every breach of historyRules
// in doc.
func historyIn(doc string) []string {
	var out []string
	for n, line := range strings.Split(doc, "\n") {
		for _, r := range historyRules {
			if m := r.re.FindString(line); m != "" {
				out = append(out, fmt.Sprintf("line %d: %s (%s)", n+1, r.name, strings.TrimSpace(m)))
			}
		}
	}
	return out
}

// TestDocsNameNoIssueOrBranch: no document outside the logs names an issue
// number or a branch.
func TestDocsNameNoIssueOrBranch(t *testing.T) {
	for _, file := range presentDocs(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		for _, breach := range historyIn(string(b)) {
			t.Errorf("%s: %s: say what is, and leave how it got there to CHANGELOG.md or docs/benchmarks-log.md", name, breach)
		}
	}
}

func TestHistoryRules(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"until issue 26 they were counted", true},
		{"see issue #27", true},
		{"(issues 11 and 26)", true},
		{"[tracing](benchmarks.md#9-tracing-cost-per-decision-issue-16)", true},
		{"fixed in #27.", true},
		{"PR 12", true},
		{"branch i26-alloc, a loaded machine", true},
		{"(3 Dec 2026, i22-surge)", true},
		{"merged from house-docs", true},
		{"on feature/fast-path", true},
		{"the fix-redis-timeouts work", true},
		{"measured on main `32c5d94`", true},
		{"[releases](docs/deploy.md#12-releases)", false},
		{"## 12. Releases", false},
		{"compared with v0.1.0", false},
		{"a branch of the decision tree", false},
		{"the main branch", false},
		{"i18n of the pages", false},
		{"a fixed window", false},
		{"color: #fff", false},
	} {
		if got := len(historyIn(c.line)) > 0; got != c.want {
			t.Errorf("historyIn(%q): got a breach %v, want %v", c.line, got, c.want)
		}
	}
}

// maxBenchmarksLines keeps docs/benchmarks.md a page a reader scans in a
// minute: the current figures and their commands. Runs pile up in
// docs/benchmarks-log.md instead.
const maxBenchmarksLines = 400

func TestBenchmarksIsAPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxBenchmarksLines {
		t.Errorf("docs/benchmarks.md is %d lines, want at most %d: keep the current figures, move the runs to docs/benchmarks-log.md", n, maxBenchmarksLines)
	}
}

// TestBenchmarksLogIsDated: docs/benchmarks-log.md is one section per day
// ("## 4 Dec 2026"), newest first, so that every entry carries its date.
func TestBenchmarksLogIsDated(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "benchmarks-log.md"))
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	days := 0
	for n, line := range prose(string(b)) {
		if !strings.HasPrefix(line, "## ") {
			continue
		}
		days++
		if _, err := time.Parse("2 Jan 2006", strings.TrimPrefix(line, "## ")); err != nil {
			t.Errorf("docs/benchmarks-log.md:%d: %q: want a day, \"## 2 Jan 2006\"", n, line)
		}
	}
	// Map order is random: check the order on the lines in sequence.
	for _, line := range strings.Split(string(b), "\n") {
		if d, err := time.Parse("2 Jan 2006", strings.TrimPrefix(line, "## ")); err == nil && strings.HasPrefix(line, "## ") {
			if !last.IsZero() && !d.Before(last) {
				t.Errorf("docs/benchmarks-log.md: %q after %s: want the newest day first", line, last.Format("2 Jan 2006"))
			}
			last = d
		}
	}
	if days == 0 {
		t.Error("docs/benchmarks-log.md has no dated section")
	}
}
