# OCI image helpers shared by hack/build-images.sh and hack/conformance.sh: rootfs directories
# become single-layer OCI image-layout tarballs (bash, tar, gzip and sha256sum only: no docker,
# buildah or registry), cached in $IMAGE_CACHE, imported into containerd and smoke-run.
# Source it after lib.sh; do not run it.
#
# The caller sets WORK to a scratch directory before building, and runs oci_cleanup on exit
# (it removes WORK and the smoke-run containers). Builds are reproducible: same inputs, same
# digests; the tarball bytes do not depend on which script builds them.
# shellcheck shell=bash

BUSYBOX_BIN=/bin/busybox
PAUSE_SRC="$KUBELET_RS_ROOT/hack/pause/pause.c"
IMAGE_CACHE="$KUBELET_RS_CACHE/images"
SNAPSHOTTER=overlayfs
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EPOCH=1970-01-01T00:00:00Z

MT_INDEX=application/vnd.oci.image.index.v1+json
MT_MANIFEST=application/vnd.oci.image.manifest.v1+json
MT_CONFIG=application/vnd.oci.image.config.v1+json
MT_LAYER_GZIP=application/vnd.oci.image.layer.v1.tar+gzip

# Permissions in the layers must not depend on the caller's umask.
umask 022

WORK=""
SMOKE_IDS=()
oci_cleanup() {
	local id
	for id in "${SMOKE_IDS[@]}"; do
		remove_container "$id"
	done
	[[ -z "$WORK" ]] || rm -rf "$WORK"
}

# Deterministic tar of DIR's contents on stdout: sorted names, zero mtimes, numeric root owner.
reproducible_tar() {
	local dir="$1" entries
	mapfile -t entries < <(find "$dir" -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort)
	LC_ALL=C tar --create --file=- --directory="$dir" --format=gnu --sort=name \
		--mtime=@0 --owner=0 --group=0 --numeric-owner -- "${entries[@]}"
}

# Stores stdin as a blob in the layout at $1; prints "sha256:<hex> <size>".
put_blob() {
	local layout="$1" tmp hex size
	tmp="$(mktemp "$layout/blob.XXXXXX")"
	cat >"$tmp"
	hex="$(sha256_file "$tmp")"
	size="$(stat -c %s "$tmp")"
	chmod 0644 "$tmp"
	mv "$tmp" "$layout/blobs/sha256/$hex"
	echo "sha256:$hex $size"
}

# make_oci_archive ROOTFS IMAGE_REF CONFIG_JSON_BODY OUT_TAR
#   CONFIG_JSON_BODY is the inner object of the image config's "config" field.
# Writes the OCI layout tarball and prints the manifest digest.
make_oci_archive() {
	local rootfs="$1" ref="$2" config_body="$3" out="$4"
	local layout
	layout="$WORK/layout-$(basename "$out")"
	rm -rf "$layout"
	mkdir -p "$layout/blobs/sha256"

	local layer_tar="$WORK/layer.tar" diff_id layer_digest layer_size
	reproducible_tar "$rootfs" >"$layer_tar"
	diff_id="sha256:$(sha256_file "$layer_tar")"
	local blob
	blob="$(gzip -n -9 -c "$layer_tar" | put_blob "$layout")"
	read -r layer_digest layer_size <<<"$blob"
	rm -f "$layer_tar"

	# The history entry names build-images.sh, where this code started: it is part of the config
	# blob, so changing it would change every digest.
	local arch config_digest config_size
	arch="$(oci_arch)"
	blob="$(printf '%s' \
		"{\"created\":\"$EPOCH\",\"architecture\":\"$arch\",\"os\":\"linux\",\"config\":{$config_body},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"$diff_id\"]},\"history\":[{\"created\":\"$EPOCH\",\"created_by\":\"kubelet-rs hack/build-images.sh\"}]}" |
		put_blob "$layout")"
	read -r config_digest config_size <<<"$blob"

	local manifest_digest manifest_size
	blob="$(printf '%s' \
		"{\"schemaVersion\":2,\"mediaType\":\"$MT_MANIFEST\",\"config\":{\"mediaType\":\"$MT_CONFIG\",\"digest\":\"$config_digest\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"$MT_LAYER_GZIP\",\"digest\":\"$layer_digest\",\"size\":$layer_size}]}" |
		put_blob "$layout")"
	read -r manifest_digest manifest_size <<<"$blob"

	# ref.name carries only the tag (OCI convention); containerd takes the full name from
	# io.containerd.image.name, so the import needs no --base-name.
	printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"$MT_INDEX\",\"manifests\":[{\"mediaType\":\"$MT_MANIFEST\",\"digest\":\"$manifest_digest\",\"size\":$manifest_size,\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":$(json_str "$ref"),\"org.opencontainers.image.ref.name\":$(json_str "${ref##*:}")}}]}" \
		>"$layout/index.json"
	printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
	chmod 0644 "$layout/index.json" "$layout/oci-layout"
	chmod 0755 "$layout/blobs" "$layout/blobs/sha256"

	reproducible_tar "$layout" >"$out.tmp"
	mv "$out.tmp" "$out"
	rm -rf "$layout"
	echo "$manifest_digest"
}

pause_rootfs() {
	local rootfs="$1"
	mkdir -p "$rootfs"
	# No build id: the binary must be byte-identical across builds of the same source.
	gcc -Os -static -s -Wall -Wextra -Werror -Wl,--build-id=none \
		-o "$rootfs/pause" "$PAUSE_SRC"
	chmod 0755 "$rootfs" "$rootfs/pause"
}

busybox_rootfs() {
	local rootfs="$1" applet
	mkdir -p "$rootfs"/{bin,etc,root,home,var,tmp}
	install -m 0755 "$BUSYBOX_BIN" "$rootfs/bin/busybox"
	while read -r applet; do
		[[ -n "$applet" && "$applet" != busybox && "$applet" != */* ]] || continue
		ln -s busybox "$rootfs/bin/$applet"
	done < <("$BUSYBOX_BIN" --list)
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/home:/bin/false' \
		>"$rootfs/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$rootfs/etc/group"
	chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
	chmod 0755 "$rootfs" "$rootfs"/{bin,etc,home,var}
	chmod 0700 "$rootfs/root"
	chmod 1777 "$rootfs/tmp"
}

# build_cached NAME REF INPUTS_HASH ROOTFS_FN CONFIG_BODY
# Leaves $IMAGE_CACHE/NAME.oci.tar and NAME.digest current; rebuilds only on changed inputs.
build_cached() {
	local name="$1" ref="$2" inputs="$3" rootfs_fn="$4" config_body="$5"
	local tarball="$IMAGE_CACHE/$name.oci.tar"
	local inputs_file="$IMAGE_CACHE/$name.inputs" digest_file="$IMAGE_CACHE/$name.digest"
	if [[ -f "$tarball" && -s "$digest_file" && "$(cat "$inputs_file" 2>/dev/null)" == "$inputs" ]]; then
		log "$ref: cached $tarball ($(cat "$digest_file"))"
		return
	fi
	local rootfs="$WORK/rootfs-$name" digest
	rm -rf "$rootfs"
	"$rootfs_fn" "$rootfs"
	digest="$(make_oci_archive "$rootfs" "$ref" "$config_body" "$tarball")"
	rm -rf "$rootfs"
	echo "$digest" >"$digest_file"
	# Written last: an interrupted build leaves no matching inputs file, so it is redone.
	echo "$inputs" >"$inputs_file"
	log "$ref: built $tarball ($digest)"
}

image_digest_in_containerd() {
	ctr_ns images ls | awk -v ref="$1" '$1 == ref { print $3 }'
}

# A single-layer image's chain id is its diff id; that snapshot exists once the image is
# unpacked for the snapshotter.
image_unpacked() {
	local tarball="$1" config_digest diff_id
	config_digest="$(tar -xOf "$tarball" "blobs/sha256/$(cut -d: -f2 <"${tarball%.oci.tar}.digest")" |
		grep -o '"config":{[^}]*}' | grep -o 'sha256:[0-9a-f]*')"
	diff_id="$(tar -xOf "$tarball" "blobs/sha256/${config_digest#sha256:}" |
		grep -o '"diff_ids":\["sha256:[0-9a-f]*' | grep -o 'sha256:[0-9a-f]*')"
	ctr_ns snapshots --snapshotter "$SNAPSHOTTER" info "$diff_id" >/dev/null 2>&1
}

remove_container() {
	local id="$1"
	ctr_ns tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
	ctr_ns tasks rm -f "$id" >/dev/null 2>&1 || true
	ctr_ns containers rm "$id" >/dev/null 2>&1 || true
}

# smoke_run REF EXPECTED_OUTPUT CMD...: runs CMD in a throwaway container and checks its output.
smoke_run() {
	local ref="$1" expected="$2"
	shift 2
	local id="kubelet-rs-smoke-$$-$RANDOM" out
	SMOKE_IDS+=("$id")
	if ! out="$(timeout 60 ctr --address "$CONTAINERD_SOCKET" -n "$KUBELET_RS_NAMESPACE" \
		run --rm --snapshotter "$SNAPSHOTTER" "$ref" "$id" "$@" 2>&1)"; then
		die "$ref: smoke run of '$*' failed: $out"
	fi
	remove_container "$id"
	[[ "$out" == *"$expected"* ]] || die "$ref: smoke run of '$*' printed '$out', expected '$expected'"
	log "$ref: smoke run of '$*' ok"
}

# import_if_needed NAME REF SMOKE_EXPECTED SMOKE_CMD...
import_if_needed() {
	local name="$1" ref="$2" expected="$3"
	shift 3
	local tarball="$IMAGE_CACHE/$name.oci.tar" want have
	want="$(cat "$IMAGE_CACHE/$name.digest")"
	have="$(image_digest_in_containerd "$ref")"
	if [[ "$have" == "$want" ]] && image_unpacked "$tarball"; then
		log "$ref: already in containerd namespace $KUBELET_RS_NAMESPACE ($want, unpacked)"
		return
	fi
	local why=""
	if [[ "$have" == "$want" ]]; then
		why=" (present but not unpacked for $SNAPSHOTTER)"
	elif [[ -n "$have" ]]; then
		why=" (replacing $have)"
	fi
	log "$ref: importing into containerd namespace $KUBELET_RS_NAMESPACE$why"
	ensure_importer
	"$KUBELET_RS_BIN" image import "$tarball" --namespace "$KUBELET_RS_NAMESPACE" \
		--address "$CONTAINERD_SOCKET" >/dev/null
	have="$(image_digest_in_containerd "$ref")"
	[[ "$have" == "$want" ]] || die "$ref: after import containerd shows digest '${have:-none}', expected $want"
	image_unpacked "$tarball" || die "$ref: imported but not unpacked for $SNAPSHOTTER"
	smoke_run "$ref" "$expected" "$@"
}

# The images go in through kubelet-rs's own importer (`kubelet-rs image import`, which
# unpacks for overlayfs), so the test images take the path users' tarballs take. The
# KUBELET_RS_BIN binary is used when set; otherwise a debug build, made once, on demand.
ensure_importer() {
	[[ -n "${KUBELET_RS_BIN:-}" ]] && return
	require_cargo
	log "building kubelet-rs (debug) for its image importer"
	(cd "$KUBELET_RS_ROOT" && cargo build --quiet --bin kubelet-rs)
	KUBELET_RS_BIN="$KUBELET_RS_ROOT/target/debug/kubelet-rs"
}
