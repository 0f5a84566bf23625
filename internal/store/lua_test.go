package store_test

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

var update = flag.Bool("update", false, "TestLuaLibraries: rewrite the copies of lua/lib/ in the scripts")

// TestLuaFilesAreListed holds lua/ and the one list of scripts to each
// other: every .lua file of lua/ is a listed script, and every listed
// script has its file.
func TestLuaFilesAreListed(t *testing.T) {
	files, err := fs.Glob(store.LuaFilesForTest, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, f := range files {
		onDisk[strings.TrimSuffix(strings.TrimPrefix(f, "lua/"), ".lua")] = true
	}
	listed := store.LuaScriptsForTest()
	for name := range onDisk {
		if _, ok := listed[name]; !ok {
			t.Errorf("lua/%s.lua is not a listed script", name)
		}
	}
	for name := range listed {
		if !onDisk[name] {
			t.Errorf("the list names %s, but lua/%s.lua does not exist", name, name)
		}
	}
}

// TestLuaLibraries holds the copies of lua/lib/ in the scripts to their
// files: each "-- begin lib/<name>.lua" ... "-- end lib/<name>.lua" of a
// script holds lib/<name>.lua as it is, and every file of lua/lib/ is
// copied into some script. With -update it rewrites the copies.
func TestLuaLibraries(t *testing.T) {
	scripts, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, path := range scripts {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, libs, err := withLibraries(src)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		for _, lib := range libs {
			used[lib] = true
		}
		switch {
		case bytes.Equal(got, src):
		case *update:
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: its copies of lua/lib/ differ from the files: go test ./internal/store -run TestLuaLibraries -update", path)
		}
	}
	libs, err := filepath.Glob("lua/lib/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if !used[strings.TrimPrefix(lib, "lua/")] {
			t.Errorf("%s is copied into no script", lib)
		}
	}
}

// withLibraries is src with each library copy replaced by its file's
// content, and the libraries it copies (as "lib/<name>.lua").
func withLibraries(src []byte) ([]byte, []string, error) {
	var out bytes.Buffer
	var libs []string
	lines := strings.SplitAfter(string(src), "\n")
	for i := 0; i < len(lines); i++ {
		out.WriteString(lines[i])
		lib, ok := strings.CutPrefix(strings.TrimSuffix(lines[i], "\n"), "-- begin ")
		if !ok {
			continue
		}
		end := "-- end " + lib + "\n"
		j := i + 1
		for j < len(lines) && lines[j] != end {
			j++
		}
		if j == len(lines) {
			return nil, nil, &missingEnd{lib}
		}
		b, err := os.ReadFile(filepath.Join("lua", lib))
		if err != nil {
			return nil, nil, err
		}
		out.Write(b)
		out.WriteString(end)
		libs = append(libs, lib)
		i = j
	}
	return out.Bytes(), libs, nil
}

type missingEnd struct{ lib string }

func (e *missingEnd) Error() string { return "no \"-- end " + e.lib + "\" after its begin" }

// TestLoadScriptsLoadsEveryScript starts a Redis of its own (an empty
// script cache) and checks that LoadScripts put every listed script in it.
func TestLoadScriptsLoadsEveryScript(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	ctx := context.Background()
	shas := store.LuaScriptsForTest()
	names := make([]string, 0, len(shas))
	for name := range shas {
		names = append(names, name)
	}
	sort.Strings(names)
	list := make([]string, len(names))
	for i, name := range names {
		list[i] = shas[name]
	}

	if err := store.NewRedis(rdb, redistest.Prefix()).LoadScripts(ctx); err != nil {
		t.Fatalf("LoadScripts: %v", err)
	}
	exists, err := rdb.ScriptExists(ctx, list...).Result()
	if err != nil {
		t.Fatalf("SCRIPT EXISTS: %v", err)
	}
	for i, ok := range exists {
		if !ok {
			t.Errorf("script %s (%s) is not in the server's cache after LoadScripts", names[i], list[i])
		}
	}
}
