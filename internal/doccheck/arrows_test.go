package doccheck

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The map in docs/architecture.md ("## The packages") is held to the
// imports `go list` reports for the module's non-test code:
//
//   - the code block: one line per package, `pkg -> a, b, c   (comment)`,
//     names relative to the module with `internal/` left out; `-> nothing
//     of otpguard's` means no arrows. Every package under `cmd/` and
//     `internal/` that has non-test Go files has a line, every import of
//     another package of the module is an arrow, and every arrow an import.
//   - the table: a row naming one package lists, in backquotes, exactly
//     the packages it imports (a row saying "everything below" is left
//     alone); every package of the block is named in a row, its own or its
//     parent directory's (`internal/store` holds `internal/store/redistest`).
//
// A failure says which line to add and which arrow to add or remove, so
// that the map can be brought back to the tree by reading the messages.

// goPackage is what the arrows test reads of `go list -json`.
type goPackage struct {
	ImportPath string
	Name       string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Module     *struct{ Path string }
}

// modulePackages returns the module's packages by import path (the module
// path cut off), each with the module's packages its non-test files
// import, and the module path.
func modulePackages(t *testing.T) (map[string][]string, string) {
	t.Helper()
	out, err := goListJSON()
	if err != nil {
		t.Fatalf("go list -json ./...: %v", err)
	}
	var list []goPackage
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -json: %v", err)
		}
		list = append(list, p)
	}
	if len(list) == 0 || list[0].Module == nil {
		t.Fatal("go list -json ./... listed no package of a module")
	}
	module := list[0].Module.Path
	pkgs := map[string][]string{}
	for _, p := range list {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue // the module's root package, if any, is not on the map
		}
		var imports []string
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imports = append(imports, r)
			}
		}
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			imports = nil // test files only: nothing to draw
		}
		pkgs[rel] = imports
	}
	return pkgs, module
}

// goListJSON runs `go list -json ./...` once for the tests that read it.
var goListJSON = sync.OnceValues(func() ([]byte, error) {
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	return cmd.Output()
})

// packagesSection returns the "## The packages" section of
// docs/architecture.md.
func packagesSection(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## The packages\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## The packages" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

var arrowLine = regexp.MustCompile(`^(\S+)\s+->\s+(.*?)(?:\s{2,}\(.*\))?\s*$`)

// mapArrows returns the code block's arrows: the module-relative path of
// each line's package, and the paths it points to. A map name is a path
// relative to the module with `internal/` left out; pathOf resolves it.
func mapArrows(t *testing.T, sec string, pathOf func(string) (string, bool)) (map[string][]string, []string) {
	t.Helper()
	_, block, ok := strings.Cut(sec, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal(`docs/architecture.md: no code block under "## The packages"`)
	}
	arrows := map[string][]string{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		m := arrowLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/architecture.md: %q is not `pkg -> a, b, c  (comment)`", line)
			continue
		}
		from, ok := pathOf(m[1])
		if !ok {
			t.Errorf("docs/architecture.md: remove the line %q: the module has no package %s", strings.TrimSpace(line), m[1])
			continue
		}
		if _, dup := arrows[from]; dup {
			t.Errorf("docs/architecture.md: %s has two lines", m[1])
		}
		arrows[from] = []string{}
		order = append(order, from)
		to := strings.TrimSpace(m[2])
		if to == "nothing of otpguard's" {
			continue
		}
		for _, name := range strings.Split(to, ",") {
			name = strings.TrimSpace(name)
			p, ok := pathOf(name)
			if !ok {
				t.Errorf("docs/architecture.md: remove the arrow %s -> %s: the module has no package %s", m[1], name, name)
				continue
			}
			arrows[from] = append(arrows[from], p)
		}
	}
	return arrows, order
}

// mapName is the map's name of a module-relative path: `internal/` left out.
func mapName(path string) string {
	return strings.TrimPrefix(path, "internal/")
}

// TestArchitectureArrows holds the code block of "## The packages" to the
// imports of the module's non-test code.
func TestArchitectureArrows(t *testing.T) {
	pkgs, _ := modulePackages(t)
	pathOf := func(name string) (string, bool) {
		for _, p := range []string{"internal/" + name, name} {
			if _, ok := pkgs[p]; ok {
				return p, true
			}
		}
		return "", false
	}
	arrows, _ := mapArrows(t, packagesSection(t), pathOf)

	var paths []string
	for p := range pkgs {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		imports, drawn := pkgs[p], arrows[p]
		if _, ok := arrows[p]; !ok {
			if !strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "cmd/") {
				continue
			}
			if imports == nil && !hasGoFiles(p) {
				continue // tests only
			}
			to := "nothing of otpguard's"
			if len(imports) > 0 {
				to = strings.Join(mapNames(imports), ", ")
			}
			t.Errorf("docs/architecture.md: add the line `%s -> %s`", mapName(p), to)
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(drawn, imp) {
				t.Errorf("docs/architecture.md: add the arrow %s -> %s (%s imports %s)", mapName(p), mapName(imp), p, imp)
			}
		}
		for _, d := range drawn {
			if !slices.Contains(imports, d) {
				t.Errorf("docs/architecture.md: remove the arrow %s -> %s (%s does not import %s)", mapName(p), mapName(d), p, d)
			}
		}
	}
}

// hasGoFiles reports whether the module-relative directory holds a
// non-test Go file.
func hasGoFiles(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}

func mapNames(paths []string) []string {
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = mapName(p)
	}
	return names
}

var backquoted = regexp.MustCompile("`([^`]+)`")

// TestArchitectureTable holds the table of "## The packages" to the same
// imports: a row naming one package lists exactly the module's packages
// it imports, and every package of the code block has a row.
func TestArchitectureTable(t *testing.T) {
	pkgs, _ := modulePackages(t)
	pathOf := func(name string) (string, bool) {
		name = strings.TrimSuffix(name, "/")
		for _, p := range []string{"internal/" + name, name} {
			if _, ok := pkgs[p]; ok {
				return p, true
			}
		}
		return "", false
	}
	sec := packagesSection(t)
	_, order := mapArrows(t, sec, pathOf)

	named := map[string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var rowPkgs []string
		for _, m := range backquoted.FindAllStringSubmatch(cells[1], -1) {
			if p, ok := pathOf(m[1]); ok {
				rowPkgs = append(rowPkgs, p)
				named[p] = true
			}
		}
		importsCell := cells[len(cells)-2]
		if len(rowPkgs) != 1 || strings.Contains(importsCell, "everything below") {
			continue
		}
		p := rowPkgs[0]
		var listed []string
		for _, m := range backquoted.FindAllStringSubmatch(importsCell, -1) {
			q, ok := pathOf(m[1])
			if !ok {
				if strings.HasSuffix(m[1], "/") {
					continue // a directory: "nothing of `internal/`"
				}
				t.Errorf("docs/architecture.md, the row of %s: remove `%s`: the module has no package %s", p, m[1], m[1])
				continue
			}
			listed = append(listed, q)
		}
		for _, imp := range pkgs[p] {
			if !slices.Contains(listed, imp) {
				t.Errorf("docs/architecture.md, the row of %s: add `%s` to its imports", p, mapName(imp))
			}
		}
		for _, l := range listed {
			if !slices.Contains(pkgs[p], l) {
				t.Errorf("docs/architecture.md, the row of %s: remove `%s` from its imports (%s does not import %s)", p, mapName(l), p, l)
			}
		}
	}
	for _, p := range order {
		if named[p] || named[filepath.Dir(p)] {
			continue
		}
		t.Errorf("docs/architecture.md: the table has no row for %s (add one, or name it in its parent's row)", p)
	}
}
