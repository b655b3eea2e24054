#!/usr/bin/env bash
# Builds what the Prometheus test (integration/cluster_prometheus.rs) and the recording-rule
# benchmark (hack/bench/prometheus-rules.sh) run beside the agent, each from its Go module at
# one pinned version, once:
# - prometheus and promtool (github.com/prometheus/prometheus; module v0.316.0 is Prometheus
#   3.16.0), cached under $KUBELET_RS_CACHE/prometheus/<version>/bin;
# - kube-state-metrics (k8s.io/kube-state-metrics/v2), whose kube_pod_info the stack's
#   recording rules join, cached under $KUBELET_RS_CACHE/kube-state-metrics/<version>/bin.
# Each is built in a scratch module that requires it as a tool and moved into place whole, so an
# interrupted build never leaves a binary that looks done. The web UI's assets are not built
# (no `builtinassets` tag: the HTTP API, all the tests use, needs none), and Prometheus leaves
# out every service discovery but file, http and static (`remove_all_sd`): the tests name their
# targets, which are on loopback. A missing Go toolchain or a failed build is an error. Logs go
# to stderr.
#
#   hack/prometheus/build.sh            build (or reuse) the binaries
#   hack/prometheus/build.sh --print    print the two bin directories (Prometheus's, then
#                                       kube-state-metrics'), one a line, and build nothing
#
# Environment: KUBELET_RS_PROMETHEUS_VERSION (module version, default v0.316.0: its go.mod
# asks for Go 1.26.7, which the machine's Go satisfies), KUBELET_RS_KSM_VERSION (default
# v2.20.0). hack/test.sh's prometheus-build step runs it.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

PROM_VERSION="${KUBELET_RS_PROMETHEUS_VERSION:-v0.316.0}"
PROM_MODULE=github.com/prometheus/prometheus
PROM_DIR="$KUBELET_RS_CACHE/prometheus/$PROM_VERSION"
PROM_BIN_DIR="$PROM_DIR/bin"
KSM_VERSION="${KUBELET_RS_KSM_VERSION:-v2.20.0}"
KSM_MODULE=k8s.io/kube-state-metrics/v2
KSM_DIR="$KUBELET_RS_CACHE/kube-state-metrics/$KSM_VERSION"
KSM_BIN_DIR="$KSM_DIR/bin"

if [[ "${1:-}" == --print ]]; then
	echo "$PROM_BIN_DIR"
	echo "$KSM_BIN_DIR"
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [--print]"

# stdout stays for --print alone: everything from here on (ours and go's) is logging.
exec 1>&2

prom_built() { [[ -x "$PROM_BIN_DIR/prometheus" && -x "$PROM_BIN_DIR/promtool" ]]; }
ksm_built() { [[ -x "$KSM_BIN_DIR/kube-state-metrics" ]]; }

if prom_built && ksm_built; then
	log "Prometheus $PROM_VERSION cached in $PROM_BIN_DIR, kube-state-metrics $KSM_VERSION in $KSM_BIN_DIR"
	exit 0
fi

# Two builds at once would race on the scratch modules: one builds, the other waits and then
# finds the binaries.
require_cmd flock
mkdir -p "$KUBELET_RS_CACHE/prometheus"
exec 9>"$KUBELET_RS_CACHE/prometheus/.lock"
flock 9

ensure_go "Prometheus and kube-state-metrics"

scratch=""
trap '[[ -z "$scratch" ]] || rm -rf "$scratch"' EXIT

# scratch_module DIR NAME TOOL_PKG@VERSION: a fresh module in a new scratch directory under DIR
# that requires the tool; sets $scratch.
scratch_module() {
	mkdir -p "$1"
	scratch="$(mktemp -d "$1/.build.XXXXXX")"
	(
		cd "$scratch"
		quiet "go mod init in $scratch" go mod init "kubelet-rs.local/$2"
		log "resolving $3"
		go get -tool "$3" || die "go get -tool $3 failed"
	)
}

# move_into_place SCRATCH_BIN DEST_BIN: the finished bin directory replaces DEST_BIN whole.
move_into_place() {
	rm -rf "$2"
	mkdir -p "$(dirname "$2")"
	mv "$1" "$2"
	rm -rf "$scratch"
	scratch=""
}

if prom_built; then
	log "Prometheus $PROM_VERSION cached in $PROM_BIN_DIR"
else
	start=$SECONDS
	scratch_module "$PROM_DIR" prometheus "$PROM_MODULE/cmd/prometheus@$PROM_VERSION"
	(
		cd "$scratch"
		go get -tool "$PROM_MODULE/cmd/promtool@$PROM_VERSION" ||
			die "go get -tool promtool@$PROM_VERSION failed"
		# The release's version (its VERSION file, e.g. 3.16.0), stamped as upstream's promu
		# stamps its builds, so --version and prometheus_build_info report it.
		release="$(cat "$(go list -m -f '{{.Dir}}' "$PROM_MODULE")/VERSION")"
		ldflags="-s -w -X github.com/prometheus/common/version.Version=$release"
		ldflags+=" -X github.com/prometheus/common/version.Branch=module-$PROM_VERSION"
		log "building prometheus and promtool $release ($PROM_VERSION; several minutes on 2 cores)"
		for cmd in prometheus promtool; do
			CGO_ENABLED=0 go build -trimpath -buildvcs=false -tags netgo,remove_all_sd \
				-ldflags "$ldflags" -o "$scratch/bin/$cmd" "$PROM_MODULE/cmd/$cmd" ||
				die "go build of $cmd $PROM_VERSION failed"
		done
	)
	move_into_place "$scratch/bin" "$PROM_BIN_DIR"
	log "built prometheus and promtool $PROM_VERSION in $((SECONDS - start))s: $PROM_BIN_DIR"
fi

if ksm_built; then
	log "kube-state-metrics $KSM_VERSION cached in $KSM_BIN_DIR"
else
	start=$SECONDS
	scratch_module "$KSM_DIR" kube-state-metrics "$KSM_MODULE@$KSM_VERSION"
	(
		cd "$scratch"
		log "building kube-state-metrics $KSM_VERSION (a few minutes on 2 cores)"
		CGO_ENABLED=0 go build -trimpath -buildvcs=false \
			-ldflags "-s -w -X github.com/prometheus/common/version.Version=$KSM_VERSION" \
			-o "$scratch/bin/kube-state-metrics" "$KSM_MODULE" ||
			die "go build of kube-state-metrics $KSM_VERSION failed"
	)
	move_into_place "$scratch/bin" "$KSM_BIN_DIR"
	log "built kube-state-metrics $KSM_VERSION in $((SECONDS - start))s: $KSM_BIN_DIR"
fi
