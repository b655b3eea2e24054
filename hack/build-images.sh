#!/usr/bin/env bash
# Builds the two test images kubelet-rs needs on a machine with no registry:
#   registry.k8s.io/pause:3.10      a static pause binary from hack/pause/pause.c
#   docker.io/library/busybox:1.36  Debian's busybox-static with one symlink per applet
#   registry.k8s.io/metrics-server/metrics-server:v0.8.0
#                                   the static binary hack/cluster/build-metrics-server.sh
#                                   builds, configured as upstream's image (distroless/static:
#                                   entrypoint the binary, user 65534); left out, with a
#                                   warning, until that binary exists (hack/test.sh builds it
#                                   first, in its k8s-build step)
# as OCI image-layout tarballs (bash, tar, gzip and sha256sum only: no docker, buildah or
# registry) and imports them with `kubelet-rs image import` into the agent's containerd
# namespace, unpacked for overlayfs.
#
# Tarballs are cached in $KUBELET_RS_CACHE/images and rebuilt only when their inputs change;
# the import is skipped when containerd already has the same manifest digest unpacked.
# Builds are reproducible: same inputs, same digests.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/lib-oci.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-oci.sh"

PAUSE_IMAGE=registry.k8s.io/pause:3.10
BUSYBOX_IMAGE=docker.io/library/busybox:1.36
METRICS_SERVER_IMAGE=registry.k8s.io/metrics-server/metrics-server:v0.8.0
METRICS_SERVER_BIN="$(KUBELET_RS_METRICS_SERVER_VERSION="${METRICS_SERVER_IMAGE##*:}" \
	"$KUBELET_RS_ROOT/hack/cluster/build-metrics-server.sh" --print)"

trap oci_cleanup EXIT

# The scripts every image comes from: their hashes are part of each image's inputs.
IMAGE_SCRIPTS=("$KUBELET_RS_ROOT/hack/build-images.sh" "$KUBELET_RS_ROOT/hack/lib.sh"
	"$KUBELET_RS_ROOT/hack/lib-oci.sh")

pause_inputs() {
	{
		echo "arch $(oci_arch)"
		sha256sum "${IMAGE_SCRIPTS[@]}" "$PAUSE_SRC" | cut -d' ' -f1
		gcc --version | head -n1
		dpkg-query -W -f='${Version}\n' libc6-dev 2>/dev/null || true
	} | sha256_stdin
}

busybox_inputs() {
	{
		echo "arch $(oci_arch)"
		sha256sum "${IMAGE_SCRIPTS[@]}" "$BUSYBOX_BIN" | cut -d' ' -f1
	} | sha256_stdin
}

metrics_server_inputs() {
	{
		echo "arch $(oci_arch)"
		sha256sum "${IMAGE_SCRIPTS[@]}" "$METRICS_SERVER_BIN" | cut -d' ' -f1
	} | sha256_stdin
}

# As gcr.io/distroless/static, upstream's base: the accounts of its /etc/passwd (root, nobody,
# nonroot) and a world-writable /tmp; the binary alone at /.
metrics_server_rootfs() {
	local rootfs="$1"
	mkdir -p "$rootfs"/{etc,root,home/nonroot,tmp}
	install -m 0755 "$METRICS_SERVER_BIN" "$rootfs/metrics-server"
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$rootfs/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$rootfs/etc/group"
	chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
	chmod 0755 "$rootfs" "$rootfs"/{etc,home}
	chmod 0700 "$rootfs/root" "$rootfs/home/nonroot"
	chmod 1777 "$rootfs/tmp"
}

main() {
	require_root
	require_cmd gcc tar gzip sha256sum ctr flock "$BUSYBOX_BIN"
	require_containerd
	mkdir -p "$IMAGE_CACHE"
	# Parallel runs (two shells, or a test run during local-up) would race on the cache.
	exec 9>"$IMAGE_CACHE/.lock"
	flock 9
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/kubelet-rs-images.XXXXXX")"

	build_cached pause "$PAUSE_IMAGE" "$(pause_inputs)" pause_rootfs \
		"\"User\":\"65535:65535\",\"Env\":[\"PATH=$DEFAULT_PATH\"],\"Entrypoint\":[\"/pause\"],\"WorkingDir\":\"/\""
	build_cached busybox "$BUSYBOX_IMAGE" "$(busybox_inputs)" busybox_rootfs \
		"\"Env\":[\"PATH=$DEFAULT_PATH\"],\"Cmd\":[\"sh\"]"

	import_if_needed pause "$PAUSE_IMAGE" "kubelet-rs pause" /pause -v
	import_if_needed busybox "$BUSYBOX_IMAGE" ok echo ok

	if [[ -x "$METRICS_SERVER_BIN" ]]; then
		build_cached metrics-server "$METRICS_SERVER_IMAGE" "$(metrics_server_inputs)" metrics_server_rootfs \
			"\"User\":\"65534\",\"Env\":[\"PATH=$DEFAULT_PATH\"],\"Entrypoint\":[\"/metrics-server\"],\"WorkingDir\":\"/\""
		# The cluster tests import it into their nodes' namespaces from the tarball; here it goes
		# into the agent's default one, as the others, for a local cluster (hack/local-up.sh).
		import_if_needed metrics-server "$METRICS_SERVER_IMAGE" "--kubelet-insecure-tls" /metrics-server --help
	else
		warn "$METRICS_SERVER_IMAGE left out: $METRICS_SERVER_BIN is not built (hack/cluster/build.sh builds it)"
	fi

	ctr_ns images ls | awk -v a="$PAUSE_IMAGE" -v b="$BUSYBOX_IMAGE" -v c="$METRICS_SERVER_IMAGE" \
		'NR == 1 || $1 == a || $1 == b || $1 == c'
}

main "$@"
