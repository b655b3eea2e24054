#!/usr/bin/env bash
# Builds every Go program a kind node image with kubelet-rs needs, from the Go module proxy
# only, once: kind itself, kubeadm, kubectl and kube-proxy (k8s.io/kubernetes at the pinned
# version), crictl (sigs.k8s.io/cri-tools), etcd (go.etcd.io/etcd/server/v3) and CoreDNS.
# Each binary is cached under $KUBELET_RS_CACHE/kind/bin/<name>-<version>, outside the
# repository; a second run with them present does nothing. A failed build is an error.
#
#   hack/kind/build-tools.sh           build (or reuse) everything
#   hack/kind/build-tools.sh --print   print the bin directory only
#
# Environment: KUBELET_RS_K8S_VERSION (default v1.34.4), and the versions below.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-k8s.sh"
# shellcheck source=hack/kind/lib-kind.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-kind.sh"

if [[ "${1:-}" == --print ]]; then
	echo "$KIND_BIN_DIR"
	exit 0
fi

mkdir -p "$KIND_BIN_DIR"
k8s_ensure_go "kind tools"

# go_install NAME VERSION PACKAGE@VERSION: `go install` of a main package at a version into a
# scratch GOBIN, moved to NAME-VERSION (go install names binaries after the package path, and an
# interrupted build must never leave a file that looks done).
go_install() {
	local name="$1" version="$2" pkg="$3" out="$KIND_BIN_DIR/$1-$2" gobin start
	[[ -x "$out" ]] && return 0
	log "building $name $version from $pkg"
	start=$SECONDS
	gobin="$(mktemp -d "$KIND_BIN_DIR/.gobin.XXXXXX")"
	CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w ${4:-}" "$pkg" ||
		{ rm -rf "$gobin"; die "go install $pkg failed"; }
	mv "$gobin"/* "$out"
	rm -rf "$gobin"
	log "built $name in $((SECONDS - start))s"
}

go_install kind "$KIND_VERSION" "sigs.k8s.io/kind@$KIND_VERSION"
go_install crictl "$CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
	"-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"

# kubeadm, kubectl and kube-proxy come from the kubernetes module with its staging replacements,
# which `go install pkg@version` refuses, so they are built in a module of their own.
K8S_CMDS=(kubeadm kubectl kube-proxy)
need=0
for cmd in "${K8S_CMDS[@]}"; do
	[[ -x "$KIND_BIN_DIR/$cmd-$K8S_VERSION" ]] || need=1
done
if ((need)); then
	mod="$K8S_BUILD_DIR/kind-module"
	mkdir -p "$mod"
	cd "$mod"
	k8s_go_mod kubelet-rs.local/kind-k8s-binaries >go.mod
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		for cmd in "${K8S_CMDS[@]}"; do
			printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$cmd"
		done
		printf ')\n'
	} >tools.go
	log "resolving the module graph for kubeadm/kubectl/kube-proxy $K8S_VERSION"
	go mod tidy || die "go mod tidy failed in $mod"
	ldflags="$(k8s_version_ldflags)"
	for cmd in "${K8S_CMDS[@]}"; do
		out="$KIND_BIN_DIR/$cmd-$K8S_VERSION"
		[[ -x "$out" ]] && continue
		log "building $cmd $K8S_VERSION"
		start=$SECONDS
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "k8s.io/kubernetes/cmd/$cmd" ||
			die "go build of $cmd $K8S_VERSION failed"
		mv "$out.tmp" "$out"
		log "built $cmd in $((SECONDS - start))s"
	done
	cd - >/dev/null
fi

# go_module_build NAME VERSION MODULE PACKAGE: PACKAGE (a main package of MODULE at VERSION)
# built in a module of its own, for modules whose go.mod has replace directives (etcd's server
# replaces its sibling modules with ../ paths), which `go install pkg@version` refuses; in a
# dependency's go.mod they are ignored, so the published siblings are used.
go_module_build() {
	local name="$1" version="$2" module="$3" pkg="$4" out="$KIND_BIN_DIR/$1-$2" mod start
	[[ -x "$out" ]] && return 0
	mod="$KIND_CACHE/modules/$name-$version"
	mkdir -p "$mod"
	printf 'module kubelet-rs.local/kind-%s\n\ngo 1.24\n\nrequire %s %s\n' "$name" "$module" "$version" >"$mod/go.mod"
	printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$mod/tools.go"
	log "building $name $version from $pkg"
	start=$SECONDS
	(cd "$mod" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg") ||
		die "build of $pkg $version failed (module in $mod)"
	mv "$out.tmp" "$out"
	log "built $name in $((SECONDS - start))s"
}

go_module_build etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
go_module_build coredns "$COREDNS_VERSION" github.com/coredns/coredns github.com/coredns/coredns
log "kind tools in $KIND_BIN_DIR"
