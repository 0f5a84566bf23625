package app

import (
	"runtime"
	"runtime/debug"
)

// Release is otpguard's semantic version: the release this tree is, at its
// tag (v0.1.0 for "0.1.0"), or the next one being prepared, whose changes
// CHANGELOG.md's newest section lists. scripts/release.sh refuses a tag
// that does not match it. It lives in the source, not only in a tag, so
// that a clone without tags and a build without a VCS stamp still know it.
const Release = "0.2.0"

// version and commit are set by the release script and the image build
// (-ldflags "-X github.com/otpguard/otpguard/internal/app.version=...
// -X ...app.commit=..."): the version a build is released as (Release, or
// Release-dev+commit between releases) and the commit it was built from.
// A plain go build leaves them empty: then Release, and the VCS stamp's
// revision where the build has one.
var version, commit string

// BuildInfo names the build: what `otpguard version` prints and
// otpguard_build_info carries.
type BuildInfo struct {
	Version string // semantic version
	Commit  string // the full commit hash, or "unknown"
	Go      string // the Go version it was built with
}

// Build is this binary's BuildInfo.
func Build() BuildInfo {
	b := BuildInfo{Version: version, Commit: commit, Go: runtime.Version()}
	if b.Version == "" {
		b.Version = Release
	}
	if b.Commit == "" {
		b.Commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && s.Value != "" {
					b.Commit = s.Value
				}
			}
		}
	}
	return b
}

// String is the one line `otpguard version` prints.
func (b BuildInfo) String() string {
	return b.Version + " (commit " + b.Commit + ", " + b.Go + ")"
}
