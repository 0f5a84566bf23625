package store_test

import (
	"context"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestLuaFilesAreListed holds lua/ and the one list of scripts to each
// other: every .lua file is a listed script or a listed script's library,
// and every listed script and library has its file.
func TestLuaFilesAreListed(t *testing.T) {
	files, err := fs.Glob(store.LuaFilesForTest, "lua/*")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, f := range files {
		name, ok := strings.CutSuffix(strings.TrimPrefix(f, "lua/"), ".lua")
		if !ok {
			t.Errorf("lua/ holds %s, which is not a .lua file", f)
			continue
		}
		onDisk[name] = true
	}
	libs, _ := store.LuaScriptsForTest()
	used := map[string]bool{}
	for name, list := range libs {
		used[name] = true
		for _, lib := range list {
			used[lib] = true
		}
	}
	for name := range onDisk {
		if !used[name] {
			t.Errorf("lua/%s.lua is neither a listed script nor a listed script's library", name)
		}
	}
	for name := range used {
		if !onDisk[name] {
			t.Errorf("the list names %s, but lua/%s.lua does not exist", name, name)
		}
	}
}

// TestLoadScriptsLoadsEveryScript starts a Redis of its own (an empty
// script cache) and checks that LoadScripts put every listed script in it.
func TestLoadScriptsLoadsEveryScript(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redistest.Client(t, srv.URL())
	ctx := context.Background()
	_, shas := store.LuaScriptsForTest()
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
