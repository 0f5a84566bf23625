// Package walk follows a request through the module's own code: from an
// entry function, every static call to a function or method of the module,
// in call order (the callee's arguments before the call, depth first, each
// function once), and the files those functions live in. It measures what
// the house style asks of a request's path: that it reads top to bottom,
// each step in the file of its concept, without calling back into a file it
// has left. A call through an interface or a function value is not
// followed unless bound (Program.Bind): which implementation runs is the
// wiring's choice, not the code's.
//
// It needs only the standard library: `go list -export -deps` names each
// dependency's compiled export data, the module's packages are parsed and
// type-checked from source against it, and a callee is matched to its
// declaration by name.
package walk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Program is the module's non-test code, type-checked, with every function
// and method declared in it.
type Program struct {
	module string
	dir    string
	fset   *token.FileSet
	funcs  map[string]*function
	types  map[string]*types.Package // the module's, by path inside the module
	binds  map[string][]string       // interface -> the concrete types a call through it follows
}

// function is one declaration of the module.
type function struct {
	decl *ast.FuncDecl
	info *types.Info
	file string // relative to the module's directory
}

// listed is what Load reads of `go list -json`.
type listed struct {
	ImportPath string
	Dir        string
	Export     string
	GoFiles    []string
	Standard   bool
	Module     *struct {
		Path string
		Main bool
		Dir  string
	}
	Error *struct{ Err string }
}

// Load type-checks the module's packages matched by patterns (`./...`
// when none), run from dir, the module's directory or one inside it.
func Load(dir string, patterns ...string) (*Program, error) {
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json"}, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("walk: go list: %w: %s", err, stderr.Bytes())
	}
	var pkgs []listed
	export := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("walk: go list: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("walk: %s: %s", p.ImportPath, p.Error.Err)
		}
		export[p.ImportPath] = p.Export
		pkgs = append(pkgs, p)
	}
	prog := &Program{fset: token.NewFileSet(), funcs: map[string]*function{},
		types: map[string]*types.Package{}, binds: map[string][]string{}}
	imp := importer.ForCompiler(prog.fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("walk: no export data for %s", path)
		}
		return os.Open(file)
	})
	for _, p := range pkgs {
		if p.Standard || p.Module == nil || !p.Module.Main {
			continue
		}
		prog.module, prog.dir = p.Module.Path, p.Module.Dir
		if err := prog.check(p, imp); err != nil {
			return nil, err
		}
	}
	if prog.module == "" {
		return nil, fmt.Errorf("walk: %v matched no package of the main module", patterns)
	}
	return prog, nil
}

// check parses and type-checks one package and records its functions.
func (p *Program) check(pkg listed, imp types.Importer) error {
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(p.fset, filepath.Join(pkg.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("walk: %w", err)
		}
		files = append(files, f)
	}
	info := &types.Info{
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
		Instances:  map[*ast.Ident]types.Instance{},
	}
	conf := types.Config{Importer: imp}
	checked, err := conf.Check(pkg.ImportPath, p.fset, files, info)
	if err != nil {
		return fmt.Errorf("walk: type-check %s: %w", pkg.ImportPath, err)
	}
	p.types[p.rel(pkg.ImportPath)] = checked
	for _, f := range files {
		file, err := filepath.Rel(p.dir, p.fset.File(f.Pos()).Name())
		if err != nil {
			return fmt.Errorf("walk: %w", err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if fn, ok := info.Defs[fd.Name].(*types.Func); ok {
				p.funcs[p.name(fn)] = &function{decl: fd, info: info, file: filepath.ToSlash(file)}
			}
		}
	}
	return nil
}

// name is a function's name as Walk takes it: the package's path inside
// the module, then the function, or the method with its receiver:
// `internal/httpapi.(*otpHandlers).sendOTP`, `internal/guard.Error.Error`.
func (p *Program) name(fn *types.Func) string {
	fn = fn.Origin()
	pkg := p.rel(fn.Pkg().Path())
	recv := fn.Signature().Recv()
	if recv == nil {
		return pkg + "." + fn.Name()
	}
	t, star := types.Unalias(recv.Type()), ""
	if ptr, ok := t.(*types.Pointer); ok {
		t, star = types.Unalias(ptr.Elem()), "*"
	}
	named, ok := t.(*types.Named)
	if !ok {
		return pkg + "." + fn.Name() // an interface's method: never declared with a body
	}
	if star != "" {
		return fmt.Sprintf("%s.(*%s).%s", pkg, named.Obj().Name(), fn.Name())
	}
	return fmt.Sprintf("%s.%s.%s", pkg, named.Obj().Name(), fn.Name())
}

// rel is an import path inside the module, relative to it.
func (p *Program) rel(path string) string {
	if rel, ok := strings.CutPrefix(path, p.module+"/"); ok {
		return rel
	}
	return path
}

// Bind makes a call through the interface iface (`internal/guard.Counter`)
// follow the method of each of impls (`internal/resilience.Fallback`, its
// pointer's methods included), as the wiring would. Without a binding a
// call through an interface ends the walk's branch. It fails when a name
// is not a type of the module.
func (p *Program) Bind(iface string, impls ...string) error {
	for _, name := range append([]string{iface}, impls...) {
		if p.lookupType(name) == nil {
			return fmt.Errorf("walk: no type %s in %s", name, p.module)
		}
	}
	p.binds[iface] = append(p.binds[iface], impls...)
	return nil
}

// lookupType finds a named type of the module by its name: `internal/guard.Counter`.
func (p *Program) lookupType(name string) *types.Named {
	i := strings.LastIndex(name, ".")
	if i < 0 {
		return nil
	}
	pkg, ok := p.types[name[:i]]
	if !ok {
		return nil
	}
	tn, ok := pkg.Scope().Lookup(name[i+1:]).(*types.TypeName)
	if !ok {
		return nil
	}
	named, _ := types.Unalias(tn.Type()).(*types.Named)
	return named
}

// bound returns the methods a call of the interface method fn follows:
// fn's name on each type bound to fn's interface.
func (p *Program) bound(fn *types.Func) []*types.Func {
	named, ok := types.Unalias(fn.Signature().Recv().Type()).(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return nil
	}
	var methods []*types.Func
	for _, impl := range p.binds[p.rel(named.Obj().Pkg().Path())+"."+named.Obj().Name()] {
		t := p.lookupType(impl)
		obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(t), true, t.Obj().Pkg(), fn.Name())
		if m, ok := obj.(*types.Func); ok {
			methods = append(methods, m)
		}
	}
	return methods
}

// Step is one function of a walk and the file it is declared in.
type Step struct {
	Func string
	File string
}

// Walk is the module's functions a call reaches, in the order it reaches
// them.
type Walk []Step

// Walk follows the static calls from the function named entry (see name)
// through the module's own functions.
func (p *Program) Walk(entry string) (Walk, error) {
	if _, ok := p.funcs[entry]; !ok {
		return nil, fmt.Errorf("walk: no function %s in %s (names read like internal/httpapi.(*otpHandlers).sendOTP)", entry, p.module)
	}
	var w Walk
	seen := map[string]bool{}
	var enter func(name string)
	enter = func(name string) {
		fn, ok := p.funcs[name]
		if !ok || seen[name] {
			return
		}
		seen[name] = true
		w = append(w, Step{Func: name, File: fn.file})
		inCallOrder(fn.decl.Body, func(call *ast.CallExpr) {
			callee := callee(fn.info, call)
			if callee == nil || callee.Pkg() == nil {
				return
			}
			if recv := callee.Signature().Recv(); recv != nil && types.IsInterface(recv.Type()) {
				for _, m := range p.bound(callee) {
					enter(p.name(m))
				}
				return
			}
			enter(p.name(callee))
		})
	}
	enter(entry)
	return w, nil
}

// inCallOrder calls f for each call in n in the order they happen: a
// call's function expression and arguments before the call itself.
func inCallOrder(n ast.Node, f func(*ast.CallExpr)) {
	ast.Inspect(n, func(m ast.Node) bool {
		call, ok := m.(*ast.CallExpr)
		if !ok {
			return true
		}
		inCallOrder(call.Fun, f)
		for _, a := range call.Args {
			inCallOrder(a, f)
		}
		f(call)
		return false
	})
}

// callee is the function or method a call names, or nil: a conversion, a
// builtin, a function value. An interface's method is for the caller to
// resolve.
func callee(info *types.Info, call *ast.CallExpr) *types.Func {
	fun := ast.Unparen(call.Fun)
	switch ix := fun.(type) { // an explicit instantiation: f[T](x)
	case *ast.IndexExpr:
		fun = ast.Unparen(ix.X)
	case *ast.IndexListExpr:
		fun = ast.Unparen(ix.X)
	}
	var obj types.Object
	switch e := fun.(type) {
	case *ast.Ident:
		obj = info.Uses[e]
	case *ast.SelectorExpr:
		if sel, ok := info.Selections[e]; ok {
			obj = sel.Obj()
		} else {
			obj = info.Uses[e.Sel] // a qualified identifier: pkg.F
		}
	}
	fn, _ := obj.(*types.Func)
	return fn
}

// Files is the sequence of files the walk enters: a step in another file
// than the step before it.
func (w Walk) Files() []string {
	var files []string
	for i, s := range w {
		if i == 0 || s.File != w[i-1].File {
			files = append(files, s.File)
		}
	}
	return files
}

// Returns counts the walk's returns to a file it already left: entering a
// file that an earlier step was in, from a step in another file.
func (w Walk) Returns() int {
	n := 0
	seen := map[string]bool{}
	for _, f := range w.Files() {
		if seen[f] {
			n++
		}
		seen[f] = true
	}
	return n
}

// Entries counts, per file, how many times the walk enters it.
func (w Walk) Entries() map[string]int {
	n := map[string]int{}
	for _, f := range w.Files() {
		n[f]++
	}
	return n
}

// Report writes the walk's summary: its functions and files, its returns,
// and each file's entries, most entered first; with steps, every function
// in order, marked -> where it enters a file first and <- where it
// returns to one.
func (w Walk) Report(out io.Writer, steps bool) {
	fmt.Fprintf(out, "%d functions, %d files entered %d times, %d returns to a file already left\n",
		len(w), len(w.Entries()), len(w.Files()), w.Returns())
	entries := w.Entries()
	files := make([]string, 0, len(entries))
	for f := range entries {
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b string) int {
		if entries[a] != entries[b] {
			return entries[b] - entries[a]
		}
		return strings.Compare(a, b)
	})
	for _, f := range files {
		fmt.Fprintf(out, "  %3d  %s\n", entries[f], f)
	}
	if !steps {
		return
	}
	seen := map[string]bool{}
	for i, s := range w {
		mark := "   " // in the file of the step before
		switch {
		case i > 0 && s.File == w[i-1].File:
		case seen[s.File]:
			mark = "<- " // a return to a file already left
		default:
			mark = "-> "
		}
		seen[s.File] = true
		fmt.Fprintf(out, "%s%-40s %s\n", mark, s.File, s.Func)
	}
}
