package app

import (
	"regexp"
	"strings"
	"testing"
)

// TestBuild: a build names a semantic version and a commit (or says it
// does not know it), and prints them on one line.
func TestBuild(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Release) {
		t.Fatalf("Release %q is not X.Y.Z", Release)
	}
	b := Build()
	if b.Version != Release {
		t.Errorf("a build without -ldflags: version %q, want Release %q", b.Version, Release)
	}
	if b.Commit != "unknown" && !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(b.Commit) {
		t.Errorf("commit %q, want a commit hash or unknown", b.Commit)
	}
	if s := b.String(); !strings.HasPrefix(s, Release+" (commit "+b.Commit+", go") {
		t.Errorf("String() = %q", s)
	}
}
