package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
)

// TestChangelog: CHANGELOG.md keeps Keep a Changelog's form (an
// Unreleased section first, then releases newest first, each
// "## [X.Y.Z] - YYYY-MM-DD"), and the newest release or the one being
// prepared is the Release the source names, so that a release's tag, its
// binaries and its notes agree.
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
	if heads[1][1] != app.Release {
		t.Errorf("CHANGELOG.md's newest release is %s, the source's Release %s: they move together", heads[1][1], app.Release)
	}
}
