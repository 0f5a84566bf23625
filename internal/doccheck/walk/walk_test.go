package walk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReturns(t *testing.T) {
	w := Walk{
		{"a.F", "a.go"}, {"b.G", "b.go"}, {"b.H", "b.go"}, {"a.I", "a.go"},
		{"c.J", "c.go"}, {"a.K", "a.go"}, {"b.L", "b.go"},
	}
	if diff := cmp.Diff([]string{"a.go", "b.go", "a.go", "c.go", "a.go", "b.go"}, w.Files()); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	if got, want := w.Returns(), 3; got != want {
		t.Errorf("Returns: got %d, want %d", got, want)
	}
	if diff := cmp.Diff(map[string]int{"a.go": 3, "b.go": 2, "c.go": 1}, w.Entries()); diff != "" {
		t.Errorf("Entries (-want +got):\n%s", diff)
	}
}

// TestWalk walks a small module of its own: calls in call order (arguments
// first), each function once, an interface's method only when bound.
func TestWalk(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.26\n",
		"a/a.go": `package a

import "example.com/m/b"

type Doer interface{ Do() }

type T struct{ d Doer }

func (t *T) Entry() {
	b.Outer(b.Inner())
	t.d.Do()
	t.helper()
	b.Outer(0)
}

func (t *T) helper() { b.Impl{}.Do() }
`,
		"b/b.go": `package b

func Inner() int { return 1 }

func Outer(int) { Inner() }

type Impl struct{}

func (Impl) Do() { Inner() }
`,
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prog, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	funcs := func(w Walk) string {
		var names []string
		for _, s := range w {
			names = append(names, s.Func)
		}
		return strings.Join(names, " ")
	}
	w, err := prog.Walk("a.(*T).Entry")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := funcs(w), "a.(*T).Entry b.Inner b.Outer a.(*T).helper b.Impl.Do"; got != want {
		t.Errorf("unbound: got %s, want %s", got, want)
	}
	if got, want := w.Returns(), 2; got != want { // a, b, a, b
		t.Errorf("unbound returns: got %d, want %d", got, want)
	}
	if err := prog.Bind("a.Doer", "b.Impl"); err != nil {
		t.Fatal(err)
	}
	if w, err = prog.Walk("a.(*T).Entry"); err != nil {
		t.Fatal(err)
	}
	if got, want := funcs(w), "a.(*T).Entry b.Inner b.Outer b.Impl.Do a.(*T).helper"; got != want {
		t.Errorf("bound: got %s, want %s", got, want)
	}
	if err := prog.Bind("a.Nope", "b.Impl"); err == nil {
		t.Error("Bind of a type the module lacks: no error")
	}
	if _, err := prog.Walk("a.Nope"); err == nil {
		t.Error("Walk from a function the module lacks: no error")
	}
}
