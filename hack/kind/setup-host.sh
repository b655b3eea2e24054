#!/usr/bin/env bash
# Prepares this (Debian 12) host for kind's podman provider, once, idempotently:
#   - installs podman (4.3, netavark networking), netavark, aardvark-dns, conmon, runc and
#     debootstrap from Debian, without crun and without podman's recommends;
#   - keeps /etc/cni/net.d exactly as it was: Debian's podman ships
#     /etc/cni/net.d/87-podman-bridge.conflist (10.88.0.0/16, the range kubelet-rs's own CNI
#     config uses there); it is diverted with dpkg-divert to /etc/cni/87-podman-bridge.conflist.kind-diverted
#     before the install, so dpkg never writes it, and the directory is compared afterwards;
#   - writes /etc/containers/containers.conf.d/90-kubelet-rs-kind.conf: runc as the OCI runtime
#     (crun refuses a hybrid cgroup v1 + cgroup2 host), netavark (configs under
#     /etc/containers/networks, never /etc/cni/net.d), and rlimits equal to the hard limits podman
#     starts runc with (measured; podman caps nproc at 32768 for itself): without
#     CAP_SYS_RESOURCE runc cannot raise a limit, and podman's defaults (nofile=1048576, nproc at
#     this shell's hard limit) are above them;
#   - creates an empty /lib/modules when the kernel has none (kind bind-mounts it read-only into
#     every node and podman refuses a missing source).
# A failed step is an error; nothing is skipped silently.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
require_root

PODMAN_CNI=/etc/cni/net.d/87-podman-bridge.conflist
DIVERTED=/etc/cni/87-podman-bridge.conflist.kind-diverted
CONF=/etc/containers/containers.conf.d/90-kubelet-rs-kind.conf

snapshot() { (cd /etc/cni/net.d 2>/dev/null && find . -type f -printf '%P ' -exec sha256sum {} \; | LC_ALL=C sort) || true; }
before="$(snapshot)"

mkdir -p /etc/cni
if ! dpkg-divert --list "$PODMAN_CNI" | grep -q kind-diverted; then
	dpkg-divert --local --rename --divert "$DIVERTED" --add "$PODMAN_CNI" >/dev/null
	log "diverted $PODMAN_CNI to $DIVERTED"
fi

write_conf() {
	local ulimits="$1"
	mkdir -p "$(dirname "$CONF")"
	cat >"$CONF" <<CONF
# Written by hack/kind/setup-host.sh for kind nodes running kubelet-rs.
[containers]
# Without CAP_SYS_RESOURCE runc cannot raise rlimits above the ones podman starts it with.
$ulimits

[engine]
# crun refuses hybrid cgroup hosts (cgroup v1 controllers plus a cgroup2 mount).
runtime = "runc"

[network]
# netavark keeps its configs in /etc/containers/networks; /etc/cni/net.d belongs to kubelet-rs.
network_backend = "netavark"
# Podman's default network is 10.88.0.0/16, the range kubelet-rs's own CNI config uses on
# this host; kind uses a network of its own, and the default one moves out of the way.
default_subnet = "10.87.0.0/16"
CONF
}

# Netavark before podman is installed or runs: without it, podman 4.3 picks its CNI backend (there is a
# config in /etc/cni/net.d) and creates /etc/cni/net.d/cni.lock.
write_conf ""

pkgs=(podman netavark aardvark-dns conmon runc debootstrap iptables)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing ${missing[*]}"
	# runc satisfies podman's "crun | runc"; naming it keeps apt from choosing crun.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
		die "apt-get install ${missing[*]} failed (run apt-get update first?)"
fi

after="$(snapshot)"
[[ "$before" == "$after" ]] || die "/etc/cni/net.d changed while installing podman:
before: $before
after:  $after"
[[ ! -e "$PODMAN_CNI" ]] || die "$PODMAN_CNI exists despite the diversion"


# The limits podman starts its OCI runtime with (lower than this shell's: podman caps nproc
# itself), seen by a wrapper runtime that records them; the container start may fail, which is
# what this measures around.
probe="$(mktemp -d)"
printf '#!/bin/sh\ncat /proc/self/limits >%s/limits\nexec runc "$@"\n' "$probe" >"$probe/runtime"
chmod 755 "$probe/runtime"
podman_image="$(podman images -q | awk 'NR == 1')" # awk reads all: head would SIGPIPE podman (pipefail)
if [[ -z "$podman_image" ]]; then
	# Any image will do, it never runs: an empty one imported from nothing.
	podman_image="$(tar -cf - -T /dev/null | podman import - localhost/kind-limit-probe:latest)"
fi
podman --runtime "$probe/runtime" run --rm "$podman_image" true >/dev/null 2>&1 || true
[[ -s "$probe/limits" ]] || die "could not see the limits podman gives its runtime"
hard_nofile="$(awk '/^Max open files/ {print $5}' "$probe/limits")"
hard_nproc="$(awk '/^Max processes/ {print $4}' "$probe/limits")"
rm -rf "$probe"
write_conf "default_ulimits = [\"nofile=$hard_nofile:$hard_nofile\", \"nproc=$hard_nproc:$hard_nproc\"]"
log "wrote $CONF"

if [[ ! -d /lib/modules ]]; then
	mkdir -p /lib/modules
	log "created an empty /lib/modules (this kernel has no modules; kind mounts the directory)"
fi

podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}} {{.Host.CgroupsVersion}}' ||
	die "podman info failed"
[[ "$before" == "$(snapshot)" ]] || die "/etc/cni/net.d changed while setting podman up"
log "host ready for kind's podman provider"
