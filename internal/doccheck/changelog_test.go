package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
)

// TestChangelog: CHANGELOG.md keeps Keep a Changelog's form (an
// Unreleased section first, then releases newest first, each
// "## [X.Y.Z] - YYYY-MM-DD"), and the Release the source names is the
// newest release (at its tag) or a later one being prepared, so that a
// release's tag, its binaries and its notes agree.
func TestChangelog(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	heads := regexp.MustCompile(`(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$`).FindAllStringSubmatch(string(b), -1)
	if len(heads) < 2 || heads[0][1] != "Unreleased" {
		t.Fatalf("CHANGELOG.md's sections %v: want [Unreleased] first, then the releases", heads)
	}
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+$`)
	for _, h := range heads[1:] {
		if !semver.MatchString(h[1]) || h[2] == "" {
			t.Errorf("CHANGELOG.md: section %q: want ## [X.Y.Z] - YYYY-MM-DD", h[0])
		}
	}
	if !semver.MatchString(app.Release) || !atLeast(app.Release, heads[1][1]) {
		t.Errorf("the source's Release %s is older than CHANGELOG.md's newest release %s: it is that release, or the next", app.Release, heads[1][1])
	}
}

// atLeast reports whether version a (X.Y.Z) is b or newer.
func atLeast(a, b string) bool {
	var x, y [3]int
	if _, err := fmt.Sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2]); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2]); err != nil {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return x[i] > y[i]
		}
	}
	return true
}
