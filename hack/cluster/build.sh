#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries and kubectl (and with --kubelet the upstream
# kubelet, for side-by-side comparisons; no test runs it) from their Go modules at one pinned
# version, once: they are cached under $KUBELET_RS_CACHE/k8s/<version>/bin, outside the
# repository, and a second run with the binaries present does nothing. The missing ones are
# built by one `go build`, which compiles their shared packages once and links the binaries in
# parallel. A missing Go toolchain or a failed build is an error.
# metrics-server is built too (hack/cluster/build-metrics-server.sh, cached the same way), so
# hack/test.sh's k8s-build step leaves everything the cluster tests run.
#
#   hack/cluster/build.sh            build (or reuse) the control plane, kubectl, metrics-server
#   hack/cluster/build.sh --kubelet  the same and the upstream kubelet
#   hack/cluster/build.sh --print    print the bin directory only
#
# Environment: KUBELET_RS_K8S_VERSION (default v1.34.4).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-k8s.sh"

BUILD_DIR="$K8S_BUILD_DIR"
BIN_DIR="$BUILD_DIR/bin"
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

case "${1:-}" in
--print)
	echo "$BIN_DIR"
	exit 0
	;;
--kubelet) COMMANDS+=(kubelet) ;;
"") ;;
*) die "usage: $0 [--kubelet | --print]" ;;
esac

"$KUBELET_RS_ROOT/hack/cluster/build-metrics-server.sh"

all_built() {
	local cmd
	for cmd in "${COMMANDS[@]}"; do
		[[ -x "$BIN_DIR/$cmd" ]] || return 1
	done
}

if all_built; then
	log "Kubernetes $K8S_VERSION binaries cached in $BIN_DIR"
	exit 0
fi

k8s_ensure_go Kubernetes

mkdir -p "$BUILD_DIR/module" "$BIN_DIR"
cd "$BUILD_DIR/module"
k8s_go_mod kubelet-rs.local/k8s-binaries >go.mod
{
	echo "//go:build tools"
	echo
	echo "package tools"
	echo
	echo "import ("
	for cmd in "${COMMANDS[@]}"; do
		echo "	_ \"k8s.io/kubernetes/cmd/$cmd\""
	done
	echo ")"
} >tools.go

log "resolving the module graph for Kubernetes $K8S_VERSION"
go mod tidy || die "go mod tidy failed for Kubernetes $K8S_VERSION in $BUILD_DIR/module"

ldflags="$(k8s_version_ldflags)"
missing=()
for cmd in "${COMMANDS[@]}"; do
	[[ -x "$BIN_DIR/$cmd" ]] || missing+=("$cmd")
done
log "building ${missing[*]} $K8S_VERSION (the first build takes about 20 minutes on 2 cores)"
start=$SECONDS
# Built into a scratch directory and moved into place, so an interrupted build never leaves a
# binary that looks done.
scratch="$(mktemp -d "$BUILD_DIR/.build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$scratch/" \
	"${missing[@]/#/k8s.io/kubernetes/cmd/}" || die "go build of ${missing[*]} $K8S_VERSION failed"
for cmd in "${missing[@]}"; do
	mv "$scratch/$cmd" "$BIN_DIR/$cmd"
done
log "built ${missing[*]} in $((SECONDS - start))s"
log "Kubernetes $K8S_VERSION binaries in $BIN_DIR"
