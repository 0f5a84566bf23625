#!/usr/bin/env bash
# usage: deploy/image.sh [TAG]   (default otpguard:<version>)
#
# Builds the otpguard image with podman (or docker, where podman is
# missing) from what this machine has: the binary from scripts/release.sh
# for this machine's architecture, the CA certificates of the host
# (/etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates), and a
# passwd and group naming the non-root user 65532. deploy/Containerfile
# starts FROM scratch, so no base image is pulled.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=$(command -v podman || command -v docker) || { echo "image: neither podman nor docker is installed (apt-get install -y podman)" >&2; exit 1; }
certs=/etc/ssl/certs/ca-certificates.crt
[ -s $certs ] || { echo "image: no $certs (apt-get install -y ca-certificates)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
ARCHES=$(go env GOARCH) scripts/release.sh "$ctx" >/dev/null
bin=$(ls "$ctx"/otpguard-*-linux-*)
version=$(basename "$bin"); version=${version#otpguard-}; version=${version%-linux-*}
mv "$bin" "$ctx/otpguard"
cp $certs "$ctx/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n' > "$ctx/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$ctx/group"
mkdir "$ctx/data"
# A tag may not hold "+": the image is tagged with the version's build
# metadata as "-" (0.1.0-dev-3f2c...); the label keeps it whole.
tag=${1:-otpguard:${version//+/-}}
echo "image: building $tag ($version) with $engine" >&2
"$engine" build --quiet -f deploy/Containerfile --build-arg VERSION="$version" \
  --build-arg COMMIT="$(git rev-parse HEAD)" -t "$tag" "$ctx" >/dev/null
echo "$tag"
