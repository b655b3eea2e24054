#!/usr/bin/env bash
# Builds the Debian base of the kind node image, once: a debootstrap (minbase) of the host's
# Debian release with the packages kind's base image installs that a kubelet-rs node uses,
# plus containerd, runc and the CNI plugins from Debian, trimmed as kind's base image
# Dockerfile trims it (no auto-started units, journald without kmsg, /sbin/init -> systemd).
# The result is a tarball cached under $KUBELET_RS_CACHE/kind/base-<hash>.tar, keyed by the
# package list and this script; a second run with it present does nothing.
#
#   hack/kind/build-base.sh            build (or reuse); prints the tarball's path last
#
# Environment: KIND_DEBIAN_MIRROR (default http://deb.debian.org/debian, as the host's apt).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-k8s.sh"
# shellcheck source=hack/kind/lib-kind.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-kind.sh"
require_root
require_cmd debootstrap chroot

MIRROR="${KIND_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="$(. /etc/os-release && echo "$VERSION_CODENAME")"
# kind's base image list, less what a kubelet-rs node never uses here (nfs-common, open-iscsi,
# fuse-overlayfs: rootless only), plus containerd/runc/CNI plugins (kind builds those from
# source) and kmod's friends.
PKGS=(systemd dbus conntrack iptables nftables iproute2 ethtool util-linux mount kmod
	libseccomp2 pigz e2fsprogs bash ca-certificates curl jq procps
	containerd runc containernetworking-plugins)

# Bump when the steps below change what the tarball holds.
BASE_REVISION=1
key="$(printf '%s\n' "$BASE_REVISION" "$SUITE" "${PKGS[@]}" | sha256sum | cut -c1-16)"
OUT="$KIND_CACHE/base-$SUITE-$key.tar"
if [[ -f "$OUT" ]]; then
	log "base cached in $OUT"
	echo "$OUT"
	exit 0
fi
mkdir -p "$KIND_CACHE"
ROOT="$(mktemp -d "$KIND_CACHE/.base.XXXXXX")"
cleanup() {
	local m
	for m in dev/pts dev proc sys; do
		mountpoint -q "$ROOT/$m" && umount -l "$ROOT/$m"
	done
	rm -rf "$ROOT"
}
trap cleanup EXIT

start=$SECONDS
log "debootstrap $SUITE (minbase) from $MIRROR"
debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
	die "debootstrap failed; see $ROOT.debootstrap.log"
rm -f "$ROOT.debootstrap.log"

# The host's sources (updates and security), so the node's packages match the host's.
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
	cp /etc/apt/sources.list.d/debian.sources "$ROOT/etc/apt/sources.list.d/"
	rm -f "$ROOT/etc/apt/sources.list"
fi
# No service starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
mount -t proc proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
mount --bind /dev "$ROOT/dev"
log "installing ${PKGS[*]}"
chroot "$ROOT" /bin/sh -euc "
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get upgrade -y -q
	apt-get install -y -q --no-install-recommends ${PKGS[*]}
	apt-get clean
" >"$KIND_CACHE/base.install.log" 2>&1 || die "package install failed; see $KIND_CACHE/base.install.log"
for m in dev sys proc; do umount "$ROOT/$m"; done
rm -f "$ROOT/usr/sbin/policy-rc.d"

# Trimmed as kind's base image: systemd starts only what kind enables.
find "$ROOT/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$ROOT"/lib/systemd/system/multi-user.target.wants/* "$ROOT"/etc/systemd/system/*.wants/* \
	"$ROOT"/lib/systemd/system/local-fs.target.wants/* "$ROOT"/lib/systemd/system/sockets.target.wants/*udev* \
	"$ROOT"/lib/systemd/system/sockets.target.wants/*initctl* "$ROOT"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$ROOT/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$ROOT/sbin/init"
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* \
	"$ROOT"/usr/share/locale/* "$ROOT"/var/log/*.log
# A machine-id of its own is made by systemd at each node's first boot.
: >"$ROOT/etc/machine-id"

chmod 0755 "$ROOT"
tar --numeric-owner --xattrs -C "$ROOT" -cf "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
log "base built in $((SECONDS - start))s: $OUT ($(du -h "$OUT" | cut -f1))"
echo "$OUT"
