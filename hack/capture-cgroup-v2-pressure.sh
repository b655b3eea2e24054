#!/usr/bin/env bash
# Captures real PSI files (cpu.pressure, memory.pressure, io.pressure) into the v2 fixture
# tree (src/stats/testdata/v2) from this host's cgroup2 mount. The rest of that tree comes from
# hack/capture-cgroup-v2.sh's VM, whose kernel had PSI off; pressure files are tracked for every
# cgroup of a cgroup2 hierarchy even with no controller bound to it, so a hybrid host's
# /sys/fs/cgroup/unified shows them too.
#
# The root's files are the host's own. Below it the script builds
# kubepods/burstable/pod7c1f4a2e-.../{8f2b...,5e0c...} (as the fixture), puts one `sleep` in
# the sandbox leaf and, in the app leaf, two CPU spinners for 4 s (they wait for each other:
# cpu "some") and a 64 MiB O_DIRECT write (io), reads the files, then removes everything.
# Run as root: hack/capture-cgroup-v2-pressure.sh
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=src/stats/testdata/v2
MNT=${CGROUP2_MOUNT:-$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)}
[[ -n "$MNT" && -f "$MNT/cpu.pressure" ]] || { echo "no cgroup2 mount with PSI files" >&2; exit 1; }

POD=kubepods/burstable/pod7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b
SANDBOX=$POD/8f2b4d6e0a1c3e5f7b9d1a3c5e7f9b1d3a5c7e9f1b3d5a7c9e1f3b5d7a9c1e3f
APP=$POD/5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c
BASE="$MNT/krs-psi-capture-$$"
TMP=$(mktemp -d /var/tmp/krs-psi-XXXXXX)
PIDS=()

cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for d in "$APP" "$SANDBOX" "$POD" kubepods/burstable kubepods; do
		rmdir "$BASE/$d" 2>/dev/null || true
	done
	rmdir "$BASE" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

mkdir -p "$BASE/$SANDBOX" "$BASE/$APP"

# Each child moves itself into its leaf before it starts working.
sh -c "echo \$\$ > '$BASE/$SANDBOX/cgroup.procs'; exec sleep 60" &
PIDS+=($!)
for _ in 1 2; do
	sh -c "echo \$\$ > '$BASE/$APP/cgroup.procs'; end=\$((\$(date +%s) + 4)); while [ \$(date +%s) -lt \$end ]; do :; done" &
	PIDS+=($!)
done
sh -c "echo \$\$ > '$BASE/$APP/cgroup.procs'; exec dd if=/dev/zero of='$TMP/io' bs=1M count=64 oflag=direct status=none" &
PIDS+=($!)
sleep 6

for f in cpu.pressure memory.pressure io.pressure; do
	cp "$MNT/$f" "$OUT/$f"
	for d in kubepods kubepods/burstable "$POD" "$SANDBOX" "$APP"; do
		cp "$BASE/$d/$f" "$OUT/$d/$f"
	done
done
uname -r
echo "captured into $OUT"
