// Package browsertest starts the headless Chromium of the browser tests
// (the ops page's, the sign-in example's): found on the machine or the
// test skipped, failed when real services are required, since CI installs
// Debian's chromium.
package browsertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// Chromium finds Chromium; without it the test skips, or fails when real
// services are required (OTPGUARD_REQUIRE_SERVICES=1).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	redistest.Unavailable(t, "chromium is not installed (apt-get install chromium)")
	return ""
}

// Headless starts a headless Chromium at exe for the test (1280 x 1000, a
// profile of its own) and returns its context, cancelled after limit or
// when the test ends.
func Headless(t testing.TB, exe string, limit time.Duration) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	ctx, cancel := context.WithTimeout(ctx, limit)
	t.Cleanup(func() { cancel(); cancelCtx(); cancelAlloc() })
	return ctx
}

// ArtifactDir is where a test leaves files for people to look at:
// $OTPGUARD_ARTIFACTS when set (CI keeps it), else the test's temp dir.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("OTPGUARD_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// docsPictures: -docs.pictures makes Picture write the docs' pictures too.
var docsPictures = flag.Bool("docs.pictures", false, "browser tests: rewrite the pictures of docs/ (docs/ops-page.png, ...) from the pages they render")

// Picture keeps a screenshot the docs show as docs/<name>: in ArtifactDir
// always, and in the repository's docs/ when the test runs with
// -docs.pictures, so that the pictures are made by the tests that check
// the page and cannot drift from it:
//
//	go test -count=1 -run Chromium ./internal/httpapi -args -docs.pictures
func Picture(t testing.TB, name string, png []byte) {
	t.Helper()
	dirs := []string{ArtifactDir(t)}
	if *docsPictures {
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Join(root, "docs"))
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("picture: %s", path)
	}
}

// repoRoot is the directory of go.mod, above the test's own.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("browsertest: no go.mod above the test's directory")
		}
		dir = up
	}
}
