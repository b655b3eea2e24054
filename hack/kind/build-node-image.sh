#!/usr/bin/env bash
# Builds a kind node image whose kubelet is kubelet-rs, offline: no registry but Debian's
# mirror and the Go module proxy, no docker, no `kind build`.
#   base      hack/kind/build-base.sh: debootstrap of the host's Debian, trimmed as kind's base
#             image, with containerd 1.6, runc and the CNI plugins from Debian;
#   kind      kind's entrypoint, units and scripts from its module (sigs.k8s.io/kind), with this
#             directory's node/ files over them (containerd config and unit, kubelet flags,
#             kind-net, the storage manifest);
#   binaries  kubelet-rs as /usr/bin/kubelet; kubeadm, kubectl, crictl (hack/kind/build-tools.sh);
#   images    kube-apiserver, kube-controller-manager, kube-scheduler (hack/cluster/build.sh),
#             kube-proxy, etcd, CoreDNS and pause, built here as single-layer OCI images and
#             preloaded (unpacked) into the node's containerd, namespace k8s.io, under the names
#             kubeadm expects, so nothing is pulled.
# The image is imported into podman as $KIND_NODE_IMAGE (localhost/kubelet-rs-kind-node:<k8s>).
#
#   hack/kind/build-node-image.sh [--kubelet-rs-bin PATH]
#
# --kubelet-rs-bin defaults to target/release/kubelet-rs, built with cargo when missing.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-k8s.sh"
# shellcheck source=hack/lib-oci.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-oci.sh"
# shellcheck source=hack/kind/lib-kind.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-kind.sh"
require_root
require_cmd podman containerd ctr jq gcc tar

HERE="$KUBELET_RS_ROOT/hack/kind"
KRS_BIN=""
while (($#)); do
	case "$1" in
	--kubelet-rs-bin) KRS_BIN="$2"; shift 2 ;;
	*) die "unknown argument $1 (usage: $0 [--kubelet-rs-bin PATH])" ;;
	esac
done
if [[ -z "$KRS_BIN" ]]; then
	KRS_BIN="$KUBELET_RS_ROOT/target/release/kubelet-rs"
	if [[ ! -x "$KRS_BIN" ]]; then
		require_cargo
		log "building kubelet-rs (release)"
		(cd "$KUBELET_RS_ROOT" && cargo build --release --bin kubelet-rs) || die "cargo build failed"
	fi
fi
[[ -x "$KRS_BIN" ]] || die "kubelet-rs binary $KRS_BIN is missing or not executable"

total=$SECONDS
"$HERE/build-tools.sh"
CP_BIN="$K8S_BUILD_DIR/bin"
cp_built() { [[ -x "$CP_BIN/kube-apiserver" && -x "$CP_BIN/kube-controller-manager" && -x "$CP_BIN/kube-scheduler" ]]; }
cp_built || "$KUBELET_RS_ROOT/hack/cluster/build.sh"
cp_built || die "control-plane binaries missing in $CP_BIN after hack/cluster/build.sh"
tool() { echo "$KIND_BIN_DIR/$1-$2"; }
BASE_TAR="$("$HERE/build-base.sh" | tail -1)"
[[ -f "$BASE_TAR" ]] || die "base tarball missing: $BASE_TAR"
KIND_SRC="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)/images/base/files"
[[ -f "$KIND_SRC/usr/local/bin/entrypoint" ]] || die "kind's base image files not found in $KIND_SRC"

WORK="$(mktemp -d "$KIND_CACHE/.node.XXXXXX")"
CTRD_PID=""
cleanup() {
	[[ -z "$CTRD_PID" ]] || stop_pid "$CTRD_PID" "build containerd"
	rm -rf "$WORK"
}
trap cleanup EXIT
ROOT="$WORK/rootfs"
mkdir -p "$ROOT"
tar --numeric-owner --xattrs -C "$ROOT" -xf "$BASE_TAR"
chmod 0755 "$ROOT"

# --- kind's files, then ours over them --------------------------------------------------------
install -m 0755 "$KIND_SRC"/usr/local/bin/* "$ROOT/usr/local/bin/"
mkdir -p "$ROOT/kind/bin" "$ROOT/kind/manifests" "$ROOT/etc/systemd/system/kubelet.service.d"
install -m 0644 "$KIND_SRC"/kind/README.txt "$ROOT/kind/"
install -m 0755 "$KIND_SRC"/kind/bin/* "$ROOT/kind/bin/"
install -m 0644 "$KIND_SRC"/etc/crictl.yaml "$ROOT/etc/"
install -m 0644 -D "$KIND_SRC"/etc/default/kubelet "$ROOT/etc/default/kubelet"
install -m 0644 -D -t "$ROOT/etc/sysctl.d" "$KIND_SRC"/etc/sysctl.d/*
install -m 0644 "$KIND_SRC"/etc/systemd/system/*.service "$KIND_SRC"/etc/systemd/system/*.slice "$ROOT/etc/systemd/system/"
install -m 0644 "$KIND_SRC"/etc/systemd/system/kubelet.service.d/* "$ROOT/etc/systemd/system/kubelet.service.d/"
(cd "$HERE/node" && find . -type f) | while read -r f; do
	mode=0644
	[[ "$f" == ./kind/bin/* ]] && mode=0755
	install -m "$mode" -D "$HERE/node/$f" "$ROOT/$f"
done
rm -f "$ROOT/etc/systemd/system/containerd-fuse-overlayfs.service"

# Host-global sysctls: a privileged node's /proc/sys is the host's, and systemd-sysctl would
# write Debian's defaults (kernel.pid_max, kernel.sysrq, fs.protected_*) into the host kernel.
# Only kind's own files stay: net.ipv4.conf.* keys, which are per network namespace. (The
# entrypoint also makes /proc/sys read-only but for net/: kubelet-rs-entrypoint.)
rm -f "$ROOT"/usr/lib/sysctl.d/* "$ROOT"/etc/sysctl.d/99-sysctl.conf "$ROOT/etc/sysctl.conf"
if cat "$ROOT"/etc/sysctl.d/*.conf "$ROOT"/usr/lib/sysctl.d/*.conf "$ROOT"/usr/local/lib/sysctl.d/*.conf 2>/dev/null |
	grep -v '^\s*\(#\|;\|$\)' | grep -v '^net\.ipv[46]\.conf\.'; then
	die "a sysctl.d file in the node sets a key that is not per network namespace (above)"
fi

# --- binaries ---------------------------------------------------------------------------------
# Stripped: a debug build carries ~400 MB of debug info the node never uses.
install -m 0755 --strip "$KRS_BIN" "$ROOT/usr/bin/kubelet"
install -m 0755 "$(tool kubeadm "$K8S_VERSION")" "$ROOT/usr/bin/kubeadm"
install -m 0755 "$(tool kubectl "$K8S_VERSION")" "$ROOT/usr/bin/kubectl"
install -m 0755 "$(tool crictl "$CRICTL_VERSION")" "$ROOT/usr/local/bin/crictl"
# kind's containerd hook (product_uuid) in the base OCI spec, without rlimits (as kind).
chroot "$ROOT" ctr oci spec |
	jq '.hooks.createContainer[.hooks.createContainer|length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
	jq 'del(.process.rlimits)' >"$ROOT/etc/containerd/cri-base.json"
echo "$K8S_VERSION" >"$ROOT/kind/version"
mkdir -p "$ROOT/etc/kubernetes/manifests" "$ROOT/etc/cni/net.d"
systemctl --root="$ROOT" enable kubelet.service containerd.service undo-mount-hacks.service kind-net.service >/dev/null 2>&1 ||
	die "systemctl enable in the node rootfs failed"
systemctl --root="$ROOT" mask systemd-binfmt.service >/dev/null 2>&1

# --- images -----------------------------------------------------------------------------------
# Images are cached in $KIND_CACHE/images keyed by what goes into them (binaries, a revision),
# so a new kubelet-rs build does not recompress them.
IMG="$KIND_CACHE/images"
mkdir -p "$IMG"
# Bump when the image recipes below change.
IMAGES_REVISION=1
# image_cached NAME FILES...: true when $IMG/NAME.oci.tar was built from these FILES' contents.
image_cached() {
	local name="$1" sum
	shift
	sum="$(cat "$@" | sha256sum | cut -c1-16)-r$IMAGES_REVISION"
	IMAGE_KEY="$sum"
	[[ -f "$IMG/$name.oci.tar" && "$(cat "$IMG/$name.key" 2>/dev/null)" == "$sum" ]]
}
image_done() { echo "$IMAGE_KEY" >"$IMG/$1.key"; }
passwd_files() {
	mkdir -p "$1/etc" "$1/tmp"
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/:/sbin/nologin' >"$1/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$1/etc/group"
	chmod 1777 "$1/tmp"
}
# binary_image NAME REF BINARY [ENTRYPOINT_JSON]: the static BINARY as /usr/local/bin/NAME.
binary_image() {
	local name="$1" ref="$2" bin="$3" entry="${4:-}" rootfs="$WORK/rootfs-$1" body
	if image_cached "$name" "$bin"; then
		log "image $ref (cached)"
		return
	fi
	passwd_files "$rootfs"
	install -m 0755 -D "$bin" "$rootfs/usr/local/bin/$name"
	body="\"Env\":[\"PATH=$DEFAULT_PATH\"]"
	[[ -z "$entry" ]] || body="$body,\"Entrypoint\":$entry"
	make_oci_archive "$rootfs" "$ref" "$body" "$IMG/$name.oci.tar" >/dev/null
	image_done "$name"
	rm -rf "$rootfs"
	log "image $ref"
}
for b in kube-apiserver kube-controller-manager kube-scheduler; do
	binary_image "$b" "registry.k8s.io/$b:$K8S_VERSION" "$CP_BIN/$b"
done
binary_image etcd "registry.k8s.io/etcd:$ETCD_IMAGE_TAG" "$(tool etcd "$ETCD_VERSION")"
binary_image coredns "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$(tool coredns "$COREDNS_VERSION")" '["/usr/local/bin/coredns"]'

# kube-proxy execs iptables: the legacy and nft binaries, their extensions and libraries come
# from the node's own rootfs; `iptables` is the legacy one, the mode kind's entrypoint selects
# in a fresh node (no rules in either).
if image_cached kube-proxy "$(tool kube-proxy "$K8S_VERSION")" "$ROOT/usr/sbin/xtables-legacy-multi" "$ROOT/usr/sbin/xtables-nft-multi"; then
	log "image registry.k8s.io/kube-proxy:$K8S_VERSION (cached)"
else
	kp="$WORK/rootfs-kube-proxy"
	passwd_files "$kp"
	install -m 0755 -D "$(tool kube-proxy "$K8S_VERSION")" "$kp/usr/local/bin/kube-proxy"
	copy_with_libs() {
		local f lib
		for f in "$@"; do
			install -m 0755 -D "$ROOT$f" "$kp$f"
			for lib in $(chroot "$ROOT" ldd "$f" | grep -o '/[^ ]*'); do
				[[ -e "$kp$lib" ]] || install -m 0755 -D "$ROOT$(chroot "$ROOT" readlink -f "$lib")" "$kp$lib"
			done
		done
	}
	copy_with_libs /usr/sbin/xtables-legacy-multi /usr/sbin/xtables-nft-multi
	mkdir -p "$kp/usr/lib/x86_64-linux-gnu"
	cp -a "$ROOT/usr/lib/x86_64-linux-gnu/xtables" "$kp/usr/lib/x86_64-linux-gnu/"
	for l in "$ROOT"/usr/lib/x86_64-linux-gnu/xtables/*.so; do
		for lib in $(chroot "$ROOT" ldd "${l#"$ROOT"}" | grep -o '/[^ ]*'); do
			[[ -e "$kp$lib" ]] || install -m 0755 -D "$ROOT$(chroot "$ROOT" readlink -f "$lib")" "$kp$lib"
		done
	done
	for t in iptables ip6tables; do
		for s in "" -save -restore; do
			ln -sf xtables-legacy-multi "$kp/usr/sbin/$t-legacy$s"
			ln -sf xtables-nft-multi "$kp/usr/sbin/$t-nft$s"
			ln -sf xtables-legacy-multi "$kp/usr/sbin/$t$s"
		done
	done
	mkdir -p "$kp/run" "$kp/var/lib" "$kp/lib/modules"
	make_oci_archive "$kp" "registry.k8s.io/kube-proxy:$K8S_VERSION" \
		"\"Env\":[\"PATH=$DEFAULT_PATH\"],\"Entrypoint\":[\"/usr/local/bin/kube-proxy\"]" "$IMG/kube-proxy.oci.tar" >/dev/null
	image_done kube-proxy
	rm -rf "$kp"
	log "image registry.k8s.io/kube-proxy:$K8S_VERSION"
fi
if image_cached pause "$PAUSE_SRC"; then
	log "image registry.k8s.io/pause:$PAUSE_IMAGE_TAG (cached)"
else
	pause_rootfs "$WORK/rootfs-pause"
	make_oci_archive "$WORK/rootfs-pause" "registry.k8s.io/pause:$PAUSE_IMAGE_TAG" '"Entrypoint":["/pause"]' "$IMG/pause.oci.tar" >/dev/null
	image_done pause
	rm -rf "$WORK/rootfs-pause"
	log "image registry.k8s.io/pause:$PAUSE_IMAGE_TAG"
fi

# --- preload: a containerd of this build's own (own socket, state, CRI off) over the node's
# /var/lib/containerd imports and unpacks every image, as the node's containerd will see it.
C="$WORK/ctrd"
mkdir -p "$C" "$ROOT/var/lib/containerd"
cat >"$C/config.toml" <<CONF
version = 2
root = "$ROOT/var/lib/containerd"
state = "$C/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$C/c.sock"
[ttrpc]
  address = "$C/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
CONF
containerd --config "$C/config.toml" >"$C/log" 2>&1 &
CTRD_PID=$!
for _ in $(seq 100); do
	ctr --address "$C/c.sock" --connect-timeout 1s version >/dev/null 2>&1 && break
	pid_alive "$CTRD_PID" || die "build containerd exited: $(tail -5 "$C/log")"
	sleep 0.2
done
for t in "$IMG"/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,etcd,coredns,pause}.oci.tar; do
	ctr --address "$C/c.sock" -n k8s.io images import --snapshotter overlayfs "$t" >/dev/null ||
		die "import of $t into the node's containerd failed"
done
ctr --address "$C/c.sock" -n k8s.io images ls -q | sed 's/^/[preloaded] /'
stop_pid "$CTRD_PID" "build containerd"
CTRD_PID=""

# --- into podman ------------------------------------------------------------------------------
log "importing $KIND_NODE_IMAGE into podman"
old_id="$(podman image inspect --format '{{.Id}}' "$KIND_NODE_IMAGE" 2>/dev/null || true)"
tar --numeric-owner --xattrs -C "$ROOT" -c . |
	podman import \
		--change 'ENV container=docker' \
		--change 'STOPSIGNAL SIGRTMIN+3' \
		--change 'ENTRYPOINT ["/kind/bin/kubelet-rs-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]' \
		- "$KIND_NODE_IMAGE" >/dev/null || die "podman import failed"
# The previous build (about 1 GB) goes unless a node container still uses it.
if [[ -n "$old_id" && "$old_id" != "$(podman image inspect --format '{{.Id}}' "$KIND_NODE_IMAGE")" ]]; then
	podman rmi "$old_id" >/dev/null 2>&1 || log "previous image $old_id kept (in use)"
fi
log "built $KIND_NODE_IMAGE in $((SECONDS - total))s"
