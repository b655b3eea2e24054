#!/usr/bin/env bash
# Builds what the CSI integration tests (integration/cluster_csi*.rs) run beside the agent:
# - krs-csi-driver, krs-csi-registrar and krs-csi-provisioner from this folder's Go module
#   (its unit tests run first), cached under $KUBELET_RS_CACHE/csi/<key>/bin, where <key>
#   hashes go.mod, go.sum and the .go files (an edit here builds afresh; an unchanged tree
#   reuses the binaries);
# - upstream's external-attacher (csi-attacher) at one pinned version, cached under
#   $KUBELET_RS_CACHE/csi/external-attacher-<version>/bin.
# Each is built into a scratch directory and moved into place whole, so an interrupted build
# never leaves a binary that looks done. A missing Go toolchain or a failed build is an error.
# Logs go to stderr.
#
#   hack/csi/build.sh            build (or reuse) the binaries
#   hack/csi/build.sh --print    print the two bin directories (ours, then the attacher's),
#                                one a line, and build nothing
#
# Environment: KUBELET_RS_CSI_ATTACHER_VERSION (default v4.13.0). hack/test.sh's csi-build
# step runs it.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

CSI_SRC="$KUBELET_RS_ROOT/hack/csi"
CSI_CACHE="$KUBELET_RS_CACHE/csi"
ATTACHER_VERSION="${KUBELET_RS_CSI_ATTACHER_VERSION:-v4.13.0}"
ATTACHER_MODULE=github.com/kubernetes-csi/external-attacher/v4
ATTACHER_PKG="$ATTACHER_MODULE/cmd/csi-attacher"
ATTACHER_DIR="$CSI_CACHE/external-attacher-$ATTACHER_VERSION"
ATTACHER_BIN_DIR="$ATTACHER_DIR/bin"
OUR_COMMANDS=(krs-csi-driver:./driver krs-csi-registrar:./registrar krs-csi-provisioner:./provisioner)

# The sources' key: sha256 over the names and contents of go.mod, go.sum and every .go file.
source_key() {
	(
		cd "$CSI_SRC"
		{
			printf '%s\0' go.mod go.sum
			find . -type f -name '*.go' -printf '%P\0' | LC_ALL=C sort -z
		} | xargs -0 sha256sum | sha256_stdin | cut -c1-16
	)
}

OURS_DIR="$CSI_CACHE/$(source_key)"
OURS_BIN_DIR="$OURS_DIR/bin"

if [[ "${1:-}" == --print ]]; then
	echo "$OURS_BIN_DIR"
	echo "$ATTACHER_BIN_DIR"
	exit 0
fi
[[ $# -eq 0 ]] || die "usage: $0 [--print]"

# stdout stays for --print alone: everything from here on (ours and go's) is logging.
exec 1>&2

ours_built() {
	local c
	for c in "${OUR_COMMANDS[@]}"; do
		[[ -x "$OURS_BIN_DIR/${c%%:*}" ]] || return 1
	done
}
attacher_built() { [[ -x "$ATTACHER_BIN_DIR/csi-attacher" ]]; }

if ours_built && attacher_built; then
	log "CSI binaries cached in $OURS_BIN_DIR and $ATTACHER_BIN_DIR"
	exit 0
fi

# Two builds at once would race on the scratch directories: one builds, the other waits and
# then finds the binaries.
require_cmd flock
mkdir -p "$CSI_CACHE"
exec 9>"$CSI_CACHE/.lock"
flock 9

ensure_go "the CSI test binaries"

scratch=""
trap '[[ -z "$scratch" ]] || rm -rf "$scratch"' EXIT

# move_into_place SCRATCH_BIN DEST_BIN: the finished bin directory replaces DEST_BIN whole.
move_into_place() {
	rm -rf "$2"
	mkdir -p "$(dirname "$2")"
	mv "$1" "$2"
}

if ours_built; then
	log "krs-csi-driver, krs-csi-registrar and krs-csi-provisioner cached in $OURS_BIN_DIR"
else
	log "testing and building krs-csi-driver, krs-csi-registrar and krs-csi-provisioner from hack/csi"
	start=$SECONDS
	# A failing unit test fails the build: nothing is cached for these sources.
	(cd "$CSI_SRC" && go test ./...) || die "go test in hack/csi failed"
	scratch="$(mktemp -d "$CSI_CACHE/.build.XXXXXX")"
	for c in "${OUR_COMMANDS[@]}"; do
		(cd "$CSI_SRC" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" \
			-o "$scratch/bin/${c%%:*}" "${c#*:}") || die "go build of ${c%%:*} failed"
	done
	move_into_place "$scratch/bin" "$OURS_BIN_DIR"
	rm -rf "$scratch"
	scratch=""
	log "tested and built hack/csi's binaries in $((SECONDS - start))s: $OURS_BIN_DIR"
fi

if attacher_built; then
	log "csi-attacher $ATTACHER_VERSION cached in $ATTACHER_BIN_DIR"
else
	# `go install pkg@version` refuses a module whose go.mod has replace directives, as
	# external-attacher's has: build it from a scratch module that requires it as a tool.
	log "building csi-attacher $ATTACHER_VERSION (a few minutes on 2 cores)"
	start=$SECONDS
	mkdir -p "$ATTACHER_DIR"
	scratch="$(mktemp -d "$ATTACHER_DIR/.build.XXXXXX")"
	(
		cd "$scratch"
		quiet "go mod init in $scratch" go mod init kubelet-rs.local/external-attacher
		go get -tool "$ATTACHER_PKG@$ATTACHER_VERSION" ||
			die "go get -tool $ATTACHER_PKG@$ATTACHER_VERSION failed"
		# Stamped as upstream's release-tools stamp their builds, so --version reports it.
		CGO_ENABLED=0 go build -trimpath -buildvcs=false \
			-ldflags "-s -w -X main.version=$ATTACHER_VERSION" -o "$scratch/bin/csi-attacher" \
			"$ATTACHER_PKG" || die "go build of csi-attacher $ATTACHER_VERSION failed"
	)
	move_into_place "$scratch/bin" "$ATTACHER_BIN_DIR"
	rm -rf "$scratch"
	scratch=""
	log "built csi-attacher $ATTACHER_VERSION in $((SECONDS - start))s: $ATTACHER_BIN_DIR"
fi
