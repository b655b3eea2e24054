#!/usr/bin/env bash
# Captures real cgroup v2 files for the stats fixtures (src/stats/testdata/v2).
#
# The project's VM binds memory, pids and cpu to cgroup v1, so its unified mount cannot show
# what a v2 node's kubepods tree looks like. This boots Debian's kernel in a throwaway qemu VM
# (no NIC, a busybox initramfs), builds the kubelet's layout
#   kubepods/burstable/pod<uid>/{<sandbox-id>,<app-id>}
# with the pod, sandbox and app ids the stats tests use, runs a small workload in it, and dumps
# the files the collector reads over a second serial port. Only files the kernel actually has
# are written (the root cgroup has no memory.current or pids.*), so a fixture never claims more
# than a real node offers.
#
# Usage: sudo hack/capture-cgroup-v2.sh [OUTPUT_DIR]   (default src/stats/testdata/v2)
# OUTPUT_DIR is replaced as a whole; it must be empty, missing, or an earlier capture.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

POD_UID=7c1f4a2e-9d3b-4e5f-8a6b-1c2d3e4f5a6b
SANDBOX_ID=8f2b4d6e0a1c3e5f7b9d1a3c5e7f9b1d3a5c7e9f1b3d5a7c9e1f3b5d7a9c1e3f
APP_ID=5e0c1a9d3f7b2e4a6c8d0f1b3a5c7e9d1f3b5a7c9e1d3f5b7a9c1e3d5f7b9a1c
MARK=@@@cgroup-capture
BOOT_TIMEOUT="${CAPTURE_TIMEOUT:-300}"
KVM_TIMEOUT=60

OUT="${1:-$KUBELET_RS_ROOT/src/stats/testdata/v2}"

require_root

install_missing() {
	local pkgs=() p
	for p in qemu-system-x86 linux-image-amd64 busybox-static cpio; do
		dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || pkgs+=("$p")
	done
	((${#pkgs[@]})) || return 0
	log "installing ${pkgs[*]}"
	# A fresh VM image can have empty package lists; one update is cheap next to the kernel.
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" ||
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}"; }
}

install_missing
require_cmd qemu-system-x86_64 cpio gzip

KERNEL="$(find /boot -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)"
[[ -n "$KERNEL" ]] || die "no /boot/vmlinuz-*; is linux-image-amd64 installed?"
KVER="${KERNEL#/boot/vmlinuz-}"
# busybox-static replaces /bin/busybox; a dynamic one would need its libraries in the image.
BUSYBOX="$(command -v busybox || true)"
[[ -n "$BUSYBOX" ]] || die "no busybox; is busybox-static installed?"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
	die "$BUSYBOX is dynamically linked; install busybox-static"
fi

TMP="$(mktemp -d /tmp/capture-cgroup-v2.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
ROOTFS="$TMP/rootfs"
mkdir -p "$ROOTFS"/{bin,dev,proc,sys,tmp,lib/modules}
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
for applet in $("$BUSYBOX" --list); do
	[[ "$applet" == busybox ]] || ln -s busybox "$ROOTFS/bin/$applet"
done
# The kernel opens /dev/console before /init runs, which is before devtmpfs is mounted.
mknod -m 600 "$ROOTFS/dev/console" c 5 1

# Every block driver is a module in Debian's kernel. brd (a RAM disk, no dependencies) gives
# the workload a block device whose buffered reads land on the file LRU, so the fixtures have
# a real inactive_file (the working set subtracts it); tmpfs pages would sit on the anon LRU.
BRD="$(find "/lib/modules/$KVER/kernel/drivers/block" -maxdepth 1 -name 'brd.ko*' | head -n1)"
case "$BRD" in
*.ko) cp "$BRD" "$ROOTFS/lib/modules/brd.ko" ;;
*.ko.xz) xz -dc "$BRD" >"$ROOTFS/lib/modules/brd.ko" ;;
*.ko.zst) zstd -qdc "$BRD" >"$ROOTFS/lib/modules/brd.ko" ;;
*) die "no brd module for $KVER under /lib/modules" ;;
esac

cat >"$ROOTFS/init" <<EOF
#!/bin/sh
POD_UID=$POD_UID
SANDBOX_ID=$SANDBOX_ID
APP_ID=$APP_ID
MARK=$MARK
EOF
cat >>"$ROOTFS/init" <<'EOF'
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
exec </dev/console >/dev/console 2>&1

# ttyS0 carries the kernel's console, whose messages could land inside a file's text; the
# data goes out on ttyS1, which nothing else writes to, with no newline translation.
stty -F /dev/ttyS1 raw -echo -opost
exec 3>/dev/ttyS1

fail() {
	echo "$MARK failed: $*" >&3
	echo "capture failed: $*"
	sleep 1
	poweroff -f
}

CG=/sys/fs/cgroup
KUBEPODS=kubepods
BURSTABLE=$KUBEPODS/burstable
POD=$BURSTABLE/pod$POD_UID

# A controller reaches a child only through its parent's subtree_control; kubelet turns on
# every one it uses on each level above the containers.
delegate() {
	for c in cpu memory pids io; do
		if grep -qw "$c" "$CG/$1/cgroup.controllers"; then
			echo "+$c" >"$CG/$1/cgroup.subtree_control" || fail "enable $c in /$1"
		fi
	done
}

delegate .
for dir in "$KUBEPODS" "$BURSTABLE" "$POD"; do
	mkdir "$CG/$dir" || fail "mkdir /$dir"
	delegate "$dir"
done
mkdir "$CG/$POD/$SANDBOX_ID" "$CG/$POD/$APP_ID" || fail "mkdir leaves"
# As for a burstable pod with limits.memory 256Mi, the pids limit the v1 capture had, and
# limits.cpu 500m on the app container (so cpu.stat shows throttling).
echo 268435456 >"$CG/$POD/memory.max" || fail "memory.max"
echo 64 >"$CG/$POD/pids.max" || fail "pids.max"
echo "50000 100000" >"$CG/$POD/$APP_ID/cpu.max" || fail "cpu.max"

insmod /lib/modules/brd.ko rd_nr=1 rd_size=32768 || fail "insmod brd"

# The sandbox: one process that only sleeps, like pause.
sh -c 'echo $$ >"$1/cgroup.procs" && exec sleep 1000000' sh "$CG/$POD/$SANDBOX_ID" &

# The app: everything it does after joining the leaf is charged there. 20 MiB written to tmpfs
# (shmem), 16 MiB read through the RAM disk's page cache (inactive_file; the shell holds the
# device open because the last close of a block device drops its page cache), a burst of CPU,
# and 8 MiB of anonymous memory held by the shell, which stays alive waiting on its sleep.
sh -c '
	echo $$ >"$1/cgroup.procs" || exit 1
	dd if=/dev/urandom of=/tmp/app-data bs=1M count=20 || exit 1
	exec 4</dev/ram0
	dd if=/dev/ram0 of=/dev/null bs=1M count=16 || exit 1
	timeout 1 sh -c "while :; do :; done"
	held=$(head -c 8388608 /dev/zero | tr "\000" a)
	: >/tmp/app-ready
	sleep 1000000
' sh "$CG/$POD/$APP_ID" &

i=0
while [ ! -e /tmp/app-ready ]; do
	i=$((i + 1))
	[ "$i" -lt 300 ] || fail "app workload did not get ready"
	sleep 0.1
done
# memory.stat is flushed from per-cpu counters every 2 s; wait for one flush to see the app.
sleep 3

echo "$MARK kernel $(uname -r)" >&3
echo "$MARK version $(cat /proc/version)" >&3
for dir in . "$KUBEPODS" "$BURSTABLE" "$POD" "$POD/$SANDBOX_ID" "$POD/$APP_ID"; do
	for f in cgroup.controllers cgroup.subtree_control cgroup.procs cpu.stat cpu.max \
		memory.current memory.max memory.stat memory.events pids.current pids.max io.stat; do
		[ -f "$CG/$dir/$f" ] || continue
		if [ "$dir" = . ]; then rel=$f; else rel=$dir/$f; fi
		echo "$MARK begin $rel" >&3
		cat "$CG/$dir/$f" >&3
		echo "$MARK end" >&3
	done
done
echo "$MARK done" >&3
# Let the UART drain before the machine goes away.
sleep 1
poweroff -f
EOF
chmod 755 "$ROOTFS/init"

INITRD="$TMP/initrd.gz"
(cd "$ROOTFS" && find . -print0 | cpio --null --quiet -o -H newc | gzip -9) >"$INITRD"

# boot ACCEL TIMEOUT: one run of the VM; true when /init reported the capture complete.
boot() {
	local accel=$1 limit=$2 args=(-accel tcg)
	[[ "$accel" == kvm ]] && args=(-enable-kvm)
	log "booting $KERNEL ($KVER) with $accel"
	rm -f "$TMP/console.log" "$TMP/data.log"
	timeout "$limit" qemu-system-x86_64 "${args[@]}" -m 512M -smp 2 \
		-nographic -monitor none -no-reboot -nic none \
		-kernel "$KERNEL" -initrd "$INITRD" -append "console=ttyS0 panic=-1 quiet" \
		-serial "file:$TMP/console.log" -serial "file:$TMP/data.log" </dev/null || true
	grep -q "^$MARK done" "$TMP/data.log" 2>/dev/null
}

# Nested KVM can exist and still hang in the firmware (as on the project's VM); the capture
# takes seconds under KVM, so a short limit tells the cases apart before falling back to TCG.
# CAPTURE_ACCEL=kvm or tcg picks one and does not fall back.
ok=yes
case "${CAPTURE_ACCEL:-auto}" in
kvm) boot kvm "$BOOT_TIMEOUT" || ok=no ;;
tcg) boot tcg "$BOOT_TIMEOUT" || ok=no ;;
auto)
	if [[ -r /dev/kvm && -w /dev/kvm ]] && boot kvm "$KVM_TIMEOUT"; then
		:
	else
		[[ ! -e /dev/kvm ]] || warn "KVM did not complete the capture; retrying under TCG"
		boot tcg "$BOOT_TIMEOUT" || ok=no
	fi
	;;
*) die "CAPTURE_ACCEL must be auto, kvm or tcg" ;;
esac

# CAPTURE_CONSOLE=FILE keeps the VM's console (kernel and /init messages) for debugging.
[[ -z "${CAPTURE_CONSOLE:-}" ]] || cp "$TMP/console.log" "$CAPTURE_CONSOLE"
DATA="$TMP/data.log"
if [[ "$ok" == no ]]; then
	tail -n 40 "$TMP/console.log" >&2 || true
	grep "^$MARK failed" "$DATA" >&2 || true
	die "the VM did not finish the capture"
fi

STAGE="$TMP/out"
mkdir -p "$STAGE"
current=""
while IFS= read -r line || [[ -n "$line" ]]; do
	line="${line%$'\r'}"
	case "$line" in
	"$MARK begin "*)
		rel="${line#"$MARK begin "}"
		[[ "$rel" =~ ^[A-Za-z0-9._/-]+$ && "$rel" != *..* ]] || die "odd path in capture: $rel"
		current="$STAGE/$rel"
		mkdir -p "$(dirname "$current")"
		: >"$current"
		;;
	"$MARK end") current="" ;;
	"$MARK kernel "*) log "kernel: ${line#"$MARK kernel "}" ;;
	"$MARK version "*) log "version: ${line#"$MARK version "}" ;;
	"$MARK "*) ;;
	*) [[ -z "$current" ]] || printf '%s\n' "$line" >>"$current" ;;
	esac
done <"$DATA"

if [[ -e "$OUT" ]]; then
	[[ -z "$(ls -A "$OUT")" || -f "$OUT/cgroup.controllers" ]] ||
		die "$OUT is neither empty nor a cgroup capture; not replacing it"
	rm -rf "$OUT"
fi
mkdir -p "$(dirname "$OUT")"
cp -r "$STAGE" "$OUT"
log "debian package: $(dpkg-query -W -f '${Package} ${Version}' "linux-image-$KVER" 2>/dev/null || echo unknown)"
log "wrote $(find "$OUT" -type f | wc -l) files to $OUT"
