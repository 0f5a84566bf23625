#!/usr/bin/env bash
# usage: scripts/release.sh [OUTDIR]   (default dist/)
#        ARCHES=amd64 scripts/release.sh DIR   (one architecture: deploy/image.sh)
#
# Builds otpguard's release binaries from this checkout: static (CGO off)
# for linux/amd64 and linux/arm64, stamped with their version and commit,
# and a SHA256SUMS file beside them. It publishes nothing.
#
# The version is internal/app.Release. At a tag vX.Y.Z the tag must say the
# same (the script refuses otherwise); anywhere else the build is
# Release-dev+<short commit>, a pre-release of the version being prepared.
# The commit comes from git, so the binaries name it even where Go's own
# VCS stamp is off (GOFLAGS=-buildvcs=false).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}

release=$(sed -n 's/^const Release = "\(.*\)"$/\1/p' internal/app/version.go)
[[ $release =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "release: internal/app/version.go: Release $release is not X.Y.Z" >&2; exit 1; }
commit=$(git rev-parse HEAD)
version="$release-dev+$(git rev-parse --short=12 HEAD)"
if tag=$(git describe --tags --exact-match --match 'v*' 2>/dev/null); then
  [ "$tag" = "v$release" ] || { echo "release: HEAD is tagged $tag but Release is $release" >&2; exit 1; }
  grep -q "^## \[$release\] - " CHANGELOG.md || { echo "release: CHANGELOG.md has no [$release] section" >&2; exit 1; }
  version=$release
fi
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  echo "release: the work tree has uncommitted changes; the binaries are named after $commit all the same" >&2
fi

mkdir -p "$out"
rm -f "$out"/otpguard-* "$out"/SHA256SUMS
pkg=github.com/otpguard/otpguard/internal/app
for arch in ${ARCHES:-amd64 arm64}; do
  bin="otpguard-$version-linux-$arch"
  echo "release: building $bin" >&2
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X $pkg.version=$version -X $pkg.commit=$commit" -o "$out/$bin" ./cmd/otpguard
done
(cd "$out" && sha256sum otpguard-* > SHA256SUMS)
echo "release: $version ($commit) in $out:" >&2
cat "$out/SHA256SUMS"
