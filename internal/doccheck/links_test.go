// Package doccheck holds only tests: they keep README.md and docs/ true to
// the code (the README's size, every relative link and anchor, and the
// reference tables of docs/reference.md against the routes, problem codes
// and metrics the code defines) and to the present (no issue number or
// branch name outside the logs, docs/benchmarks.md a page, its log dated).
package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// maxREADME is the README's size limit: 25 KB, so that a newcomer reads it in
// ten minutes and the sections other issues add still fit.
const maxREADME = 25 * 1024

func TestREADMESize(t *testing.T) {
	fi, err := os.Stat(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxREADME {
		t.Errorf("README.md is %d bytes, want at most %d: move the depth to docs/", fi.Size(), maxREADME)
	}
}

// markdownFiles are the documents whose links must resolve.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

var (
	linkRE       = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlIDRE     = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// prose returns md's lines outside fenced code blocks, with their numbers.
func prose(md string) map[int]string {
	out := map[int]string{}
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out[i+1] = line
	}
	return out
}

// anchors returns the anchors GitHub gives md's headings (and any
// explicit <a id>): the heading's text, lower-cased, without punctuation
// other than '-' and '_', spaces made '-', a repeat suffixed -1, -2, ...
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := prose(md)
	for n := 1; n <= len(strings.Split(md, "\n")); n++ {
		line, ok := lines[n]
		if !ok {
			continue
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugOf(m[2])
		if k := seen[slug]; k > 0 {
			out[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugOf is GitHub's anchor for a heading's text.
func slugOf(heading string) string {
	heading = linkRE.ReplaceAllStringFunc(heading, func(l string) string { // a link reads as its text
		return l[strings.Index(l, "[")+1 : strings.Index(l, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		for n, line := range prose(string(b)) {
			line = inlineCodeRE.ReplaceAllString(line, "")
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: no such file", name, n, target)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				as, err := anchorsOf(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", name, n, target, err)
					continue
				}
				if !as[anchor] {
					t.Errorf("%s:%d: link %q: no heading with the anchor #%s", name, n, target, anchor)
				}
			}
		}
	}
}

func TestSlugOf(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"Watching an attack (`/ops/abuse`)", "watching-an-attack-opsabuse"},
		{"9. Tracing cost per decision (issue 16)", "9-tracing-cost-per-decision-issue-16"},
		{"0.00 Where the ratio stands, and what limits it (3 Dec 2026)", "000-where-the-ratio-stands-and-what-limits-it-3-dec-2026"},
		{"Hot keys: `mode: sync`", "hot-keys-mode-sync"},
		{"From [Envoy](https://envoyproxy.io)", "from-envoy"},
	} {
		if got := slugOf(c.heading); got != c.want {
			t.Errorf("slugOf(%q): got %q, want %q", c.heading, got, c.want)
		}
	}
}
