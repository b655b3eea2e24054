#!/usr/bin/env bash
# Pull cost: kubelet-rs's puller against `ctr images pull` (containerd's own client-side
# pull, which also unpacks) for the same ~50 MiB image from a local docker-registry on
# loopback. The image is busybox (hack/build-images.sh) plus one layer of SIZE_MIB
# (default 50) MiB of random data. Each tool pulls RUNS times (default 5) into namespace
# krs-bench-pull; between runs the image is removed with a synchronous GC, so every run
# fetches and unpacks the big layer again. Prints every run and the medians.
#
# Both are timed as whole processes (`ctr images pull --plain-http` against
# `kubelet-rs image pull`, which uses the agent's puller and reaches loopback registries over
# plain HTTP without a flag).
#
# Usage: hack/bench/pull.sh   (root, containerd, docker-registry, skopeo, the test images).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source hack/lib.sh
require_root
require_cmd ctr skopeo curl tar gzip sha256sum cargo
require_containerd

RUNS="${RUNS:-5}"
SIZE_MIB="${SIZE_MIB:-50}"
NS=krs-bench-pull
PORT="${BENCH_REGISTRY_PORT:-5099}"
BASE="$KUBELET_RS_CACHE/images/busybox.oci.tar"
[[ -f "$BASE" ]] || die "$BASE missing: run hack/build-images.sh"
WORK="$(mktemp -d /tmp/kubelet-rs-bench-pull.XXXXXX)"
REF="127.0.0.1:$PORT/bench/big:1"

cleanup() {
	hack/registry.sh stop "$WORK/registry" || true
	ctr_ns_bench images rm --sync "$REF" >/dev/null 2>&1 || true
	ctr --address "$CONTAINERD_SOCKET" namespaces rm "$NS" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

ctr_ns_bench() { ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$NS" "$@"; }
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# busybox's OCI layout plus one random layer, as an OCI archive.
build_image() {
	local layout="$WORK/layout" rootfs="$WORK/rootfs"
	mkdir -p "$layout" "$rootfs/bench"
	tar -xf "$BASE" -C "$layout"
	head -c "$((SIZE_MIB << 20))" /dev/urandom >"$rootfs/bench/random.bin"
	tar --create --file="$WORK/layer.tar" --directory="$rootfs" --sort=name --mtime=@0 \
		--owner=0 --group=0 --numeric-owner bench
	local diff_id layer_hex layer_size
	diff_id="sha256:$(sha256_file "$WORK/layer.tar")"
	gzip -1 -n -c "$WORK/layer.tar" >"$WORK/layer.tar.gz"
	layer_hex="$(sha256_file "$WORK/layer.tar.gz")"
	layer_size="$(stat -c %s "$WORK/layer.tar.gz")"
	mv "$WORK/layer.tar.gz" "$layout/blobs/sha256/$layer_hex"

	local old_manifest old_config config_hex config_size manifest manifest_hex
	old_manifest="$(grep -o '"digest":"sha256:[0-9a-f]*' "$layout/index.json" | head -n1 | cut -d: -f3)"
	old_config="$(grep -o '"config":{[^}]*}' "$layout/blobs/sha256/$old_manifest" | grep -o 'sha256:[0-9a-f]*' | cut -d: -f2)"
	sed "s|\"diff_ids\":\[\([^]]*\)\]|\"diff_ids\":[\1,\"$diff_id\"]|" \
		"$layout/blobs/sha256/$old_config" >"$WORK/config.json"
	config_hex="$(sha256_file "$WORK/config.json")"
	config_size="$(stat -c %s "$WORK/config.json")"
	mv "$WORK/config.json" "$layout/blobs/sha256/$config_hex"
	manifest="$(sed -e "s|sha256:$old_config\",\"size\":[0-9]*|sha256:$config_hex\",\"size\":$config_size|" \
		-e "s|\]}\$|,{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer_hex\",\"size\":$layer_size}]}|" \
		"$layout/blobs/sha256/$old_manifest")"
	printf '%s' "$manifest" >"$WORK/manifest.json"
	manifest_hex="$(sha256_file "$WORK/manifest.json")"
	mv "$WORK/manifest.json" "$layout/blobs/sha256/$manifest_hex"
	printf '%s' "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest_hex\",\"size\":${#manifest},\"annotations\":{\"org.opencontainers.image.ref.name\":\"1\"}}]}" \
		>"$layout/index.json"
	tar --create --file="$WORK/big.oci.tar" --directory="$layout" .
	rm -rf "$layout" "$rootfs" "$WORK/layer.tar"
}

log "building a busybox + ${SIZE_MIB} MiB image"
build_image
mkdir -p "$WORK/registry"
hack/registry.sh start "$WORK/registry" "$PORT" >/dev/null
skopeo copy --quiet --dest-tls-verify=false "oci-archive:$WORK/big.oci.tar:1" "docker://$REF"
log "pushed $REF"

ctr_times=()
for ((i = 1; i <= RUNS; i++)); do
	ctr_ns_bench images rm --sync "$REF" >/dev/null 2>&1 || true
	start="$(now_ms)"
	ctr_ns_bench images pull --plain-http "$REF" >/dev/null
	ctr_times+=($(($(now_ms) - start)))
	log "ctr images pull run $i: ${ctr_times[-1]} ms"
done
ctr_ns_bench images rm --sync "$REF" >/dev/null

log "building kubelet-rs (release)"
cargo build --release --quiet
krs_times=()
for ((i = 1; i <= RUNS; i++)); do
	ctr_ns_bench images rm --sync "$REF" >/dev/null 2>&1 || true
	start="$(now_ms)"
	target/release/kubelet-rs image pull "$REF" --namespace "$NS" --address "$CONTAINERD_SOCKET" >/dev/null
	krs_times+=($(($(now_ms) - start)))
	log "kubelet-rs image pull run $i: ${krs_times[-1]} ms"
done

ctr_median="$(printf '%s\n' "${ctr_times[@]}" | median)"
krs_median="$(printf '%s\n' "${krs_times[@]}" | median)"
echo
echo "| puller (busybox + ${SIZE_MIB} MiB, local registry, $RUNS runs) | median ms |"
echo "|---|---|"
echo "| ctr images pull --plain-http | $ctr_median |"
echo "| kubelet-rs image pull | $krs_median |"
awk -v a="$krs_median" -v b="$ctr_median" 'BEGIN {printf "\nratio kubelet-rs / ctr: %.2f\n", a / b}'
