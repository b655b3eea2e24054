#!/usr/bin/env bash
# Builds metrics-server (kubernetes-sigs/metrics-server) from its Go module at one pinned
# version, once: a scratch module that requires it as a tool, then a static build
# (CGO_ENABLED=0: the binary alone is the whole image hack/build-images.sh packs). Cached under
# $KUBELET_RS_CACHE/metrics-server/<version>/bin, outside the repository; a second run with the
# binary present does nothing. A missing Go toolchain or a failed build is an error.
#
#   hack/cluster/build-metrics-server.sh            build (or reuse) the binary
#   hack/cluster/build-metrics-server.sh --print    print the binary's path only
#
# Environment: KUBELET_RS_METRICS_SERVER_VERSION (default v0.8.0). hack/cluster/build.sh calls
# it, so hack/test.sh's k8s-build step builds it with the control plane.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

VERSION="${KUBELET_RS_METRICS_SERVER_VERSION:-v0.8.0}"
BUILD_DIR="$KUBELET_RS_CACHE/metrics-server/$VERSION"
BIN="$BUILD_DIR/bin/metrics-server"
PKG=sigs.k8s.io/metrics-server/cmd/metrics-server

if [[ "${1:-}" == --print ]]; then
	echo "$BIN"
	exit 0
fi

if [[ -x "$BIN" ]]; then
	log "metrics-server $VERSION cached in $BIN"
	exit 0
fi

# Control planes started at once (tests' private ones) would race on the scratch module: one
# builds, the others wait and then find the binary.
require_cmd flock
mkdir -p "$BUILD_DIR"
exec 9>"$BUILD_DIR/.lock"
flock 9
if [[ -x "$BIN" ]]; then
	log "metrics-server $VERSION cached in $BIN"
	exit 0
fi

ensure_go "metrics-server $VERSION"

# A fresh scratch module each time: a half-written go.mod from an interrupted run is not reused.
rm -rf "$BUILD_DIR/module"
mkdir -p "$BUILD_DIR/module" "$BUILD_DIR/bin"
cd "$BUILD_DIR/module"
quiet "go mod init in $BUILD_DIR/module" go mod init kubelet-rs.local/metrics-server
log "resolving metrics-server $VERSION"
go get -tool "$PKG@$VERSION" || die "go get -tool $PKG@$VERSION failed"

log "building metrics-server $VERSION (a few minutes on 2 cores)"
start=$SECONDS
# Stamped as upstream's Makefile stamps its release builds (client-go's version package), so
# the binary reports its version.
ldflags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
# Built to a temporary name so an interrupted build never leaves a binary that looks done.
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BUILD_DIR/bin/.metrics-server.tmp" "$PKG" ||
	die "go build of metrics-server $VERSION failed"
mv "$BUILD_DIR/bin/.metrics-server.tmp" "$BIN"
log "built metrics-server $VERSION in $((SECONDS - start))s: $BIN"
