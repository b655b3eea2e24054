#!/usr/bin/env bash
# Prepares a Debian 12 machine to run kubelet-rs: packages, CNI config, IP forwarding and a
# running containerd. Safe to run again: every step checks first and only acts when needed.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CNI_CONF_DIR=/etc/cni/net.d
CNI_CONF_FILE="$CNI_CONF_DIR/10-kubelet-rs.conflist"
CNI_BRIDGE=kubers0
DEBIAN_CNI_BIN_DIR=/usr/lib/cni
UPSTREAM_CNI_BIN_DIR=/opt/cni/bin
SYSCTL_FILE=/etc/sysctl.d/99-kubelet-rs.conf
CONTAINERD_LOG=/var/log/containerd.log

PACKAGES=(
	containerd runc containernetworking-plugins
	protobuf-compiler # containerd-client's build script runs protoc
	busybox-static    # the busybox test image is made from it
	gcc libc6-dev     # the pause binary, and cc for Rust's linker
	iproute2 iptables # CNI bridge and portmap plugins
	procps            # sysctl, pgrep
	docker-registry skopeo # the pull tests' registry on loopback, and filling it
	etcd-server openssl     # the control plane of the cluster tests (hack/cluster/)
	ca-certificates curl tar gzip coreutils
	jq util-linux # hack/run-tests.sh reads cargo's build report; flock for the scripts' locks
)

did_something=0
did() {
	did_something=1
	log "$*"
}

install_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" != "ii " ]]; then
			missing+=("$p")
		fi
	done
	if ((${#missing[@]} == 0)); then
		log "packages: all present"
		return
	fi
	did "packages: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Debian's etcd-server package enables a system etcd on 127.0.0.1:2379 where systemd runs; the
# cluster tests start their own (hack/cluster/up.sh), so the packaged one must not hold the port.
stop_packaged_etcd() {
	# Without systemd as init (containers, some VMs) no packaged service was started.
	[[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1 || return 0
	if systemctl is-active --quiet etcd 2>/dev/null || systemctl is-enabled --quiet etcd 2>/dev/null; then
		did "etcd: stopping and disabling the packaged etcd service (hack/cluster/ runs its own)"
		local out
		out="$(systemctl disable --now etcd 2>&1)" || warn "etcd: cannot disable the packaged service: $out"
	fi
}

check_rust() {
	require_cargo
	log "rust: $(cargo --version)"
	if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
		warn "rustfmt/clippy missing (hack/test.sh needs them): rustup component add rustfmt clippy"
	fi
}

# Debian installs CNI plugins in /usr/lib/cni; most tools (and the kubelet's default) look in
# /opt/cni/bin. Link each missing plugin there so both locations work.
link_cni_plugins() {
	[[ -d "$DEBIAN_CNI_BIN_DIR" ]] || return 0
	mkdir -p "$UPSTREAM_CNI_BIN_DIR"
	local plugin name linked=()
	for plugin in "$DEBIAN_CNI_BIN_DIR"/*; do
		name="$(basename "$plugin")"
		if [[ ! -e "$UPSTREAM_CNI_BIN_DIR/$name" ]]; then
			ln -s "$plugin" "$UPSTREAM_CNI_BIN_DIR/$name"
			linked+=("$name")
		fi
	done
	if ((${#linked[@]} > 0)); then
		did "cni: linked ${linked[*]} from $DEBIAN_CNI_BIN_DIR into $UPSTREAM_CNI_BIN_DIR"
	else
		log "cni: plugins present in $UPSTREAM_CNI_BIN_DIR"
	fi
}

ip_to_int() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# True when two IPv4 CIDRs share any address.
cidrs_overlap() {
	local a="${1%/*}" la="${1#*/}" b="${2%/*}" lb="${2#*/}"
	[[ "$1" == */* ]] || la=32
	[[ "$2" == */* ]] || lb=32
	local len=$((la < lb ? la : lb)) mask=0
	((len == 0)) || mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
	(($(($(ip_to_int "$a") & mask)) == $(($(ip_to_int "$b") & mask))))
}

# IPv4 prefixes this machine already uses (addresses and routes), ignoring the default route
# and our own bridge so a second run does not see its own subnet as taken.
prefixes_in_use() {
	ip -4 -o addr show | awk -v br="$CNI_BRIDGE" '$2 != br { print $4 }'
	ip -4 route show table main | awk -v br="$CNI_BRIDGE" '
		$1 == "default" { next }
		{ for (i = 1; i < NF; i++) if ($i == "dev" && $(i + 1) == br) next; if ($1 ~ /^[0-9]/) print $1; else print $2 }'
}

pick_pod_subnet() {
	local used candidate octet clash p
	used="$(prefixes_in_use)"
	for octet in 88 89 90 91 92 93 94 95 96 97 98 99; do
		candidate="10.$octet.0.0/16"
		clash=""
		for p in $used; do
			if cidrs_overlap "$candidate" "$p"; then
				clash="$p"
				break
			fi
		done
		if [[ -z "$clash" ]]; then
			echo "$candidate"
			return
		fi
		warn "cni: $candidate overlaps $clash on this machine; trying the next /16"
	done
	die "cni: no free /16 in 10.88.0.0-10.99.0.0 for pods; write $CNI_CONF_FILE by hand"
}

write_cni_config() {
	mkdir -p "$CNI_CONF_DIR"
	local existing
	existing="$(find "$CNI_CONF_DIR" -maxdepth 1 -type f \( -name '*.conf' -o -name '*.conflist' -o -name '*.json' \) | sort | head -n1)"
	if [[ -n "$existing" ]]; then
		log "cni: config present ($existing), left as it is"
		return
	fi
	local subnet
	subnet="$(pick_pod_subnet)"
	cat >"$CNI_CONF_FILE.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kubelet-rs",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$subnet" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
EOF
	mv "$CNI_CONF_FILE.tmp" "$CNI_CONF_FILE"
	did "cni: wrote $CNI_CONF_FILE (bridge $CNI_BRIDGE, pod subnet $subnet)"
}

enable_ip_forwarding() {
	local want="net.ipv4.ip_forward = 1"
	if [[ "$(cat "$SYSCTL_FILE" 2>/dev/null)" != "$want" ]]; then
		mkdir -p "$(dirname "$SYSCTL_FILE")"
		echo "$want" >"$SYSCTL_FILE"
		did "sysctl: wrote $SYSCTL_FILE so forwarding survives a reboot"
	fi
	if [[ "$(cat /proc/sys/net/ipv4/ip_forward)" == 1 ]]; then
		log "sysctl: net.ipv4.ip_forward already 1"
	elif sysctl -qw net.ipv4.ip_forward=1; then
		did "sysctl: set net.ipv4.ip_forward=1"
	else
		die "could not set net.ipv4.ip_forward=1 (read-only /proc/sys? pods would have no outside network)"
	fi
}

systemd_is_init() {
	[[ -d /run/systemd/system && "$(cat /proc/1/comm 2>/dev/null)" == systemd ]]
}

wait_for_containerd() {
	local i
	for ((i = 0; i < 30; i++)); do
		containerd_answers && return 0
		sleep 1
	done
	return 1
}

start_containerd() {
	if containerd_answers; then
		log "containerd: answering on $CONTAINERD_SOCKET"
		return
	fi
	if systemd_is_init; then
		did "containerd: starting with systemctl"
		systemctl enable --now containerd
		systemctl is-active --quiet containerd || systemctl restart containerd
	elif pgrep -x containerd >/dev/null; then
		# Probably still starting; a second daemon would fight over the same socket and state.
		log "containerd: process $(pgrep -x containerd | tr '\n' ' ')running but not answering yet; waiting"
	else
		did "containerd: starting in the background (log: $CONTAINERD_LOG)"
		# setsid: its own session, so it outlives this script and its process group.
		setsid nohup containerd >>"$CONTAINERD_LOG" 2>&1 </dev/null &
	fi
	wait_for_containerd || die "containerd did not answer on $CONTAINERD_SOCKET within 30 s; see $CONTAINERD_LOG"
	log "containerd: answering ($(ctr --address "$CONTAINERD_SOCKET" version 2>/dev/null | awk '/Server:/ { s = 1 } s && /Version:/ { print $2; exit }'))"
}

# Images are unpacked for overlayfs; if the kernel or the backing filesystem refuses it, say so
# here instead of at the first container start.
check_overlayfs() {
	local status
	status="$(ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s plugins ls 2>/dev/null |
		awk '$1 == "io.containerd.snapshotter.v1" && $2 == "overlayfs" { print $NF }')"
	if [[ "$status" == ok ]]; then
		log "containerd: overlayfs snapshotter ok"
	else
		warn "containerd: overlayfs snapshotter status is '${status:-missing}'; images will not unpack (see $CONTAINERD_LOG)"
	fi
}

main() {
	require_root
	install_packages
	stop_packaged_etcd
	check_rust
	link_cni_plugins
	write_cni_config
	enable_ip_forwarding
	start_containerd
	check_overlayfs
	if ((did_something)); then
		log "node ready"
	else
		log "node ready (nothing to do)"
	fi
}

main "$@"
