#!/usr/bin/env bash
# Installs kubelet-rs as a systemd service: the binary, the unit and its drop-in from
# deploy/systemd/, a default config and environment file (only where none exists), then
# daemon-reload, enable, and a (re)start so an upgrade runs the new binary. Pods keep running
# through the restart (the unit's KillMode=process; see deploy/systemd/README.md).
#
#   hack/install-systemd.sh [--binary FILE] [--name NAME] [--no-start] [--dest-root DIR]
#   hack/install-systemd.sh --uninstall [--purge] [--name NAME] [--dest-root DIR]
#
#   --binary FILE    the agent to install (default target/release/kubelet-rs: cargo build --release)
#   --name NAME      the unit's name (default kubelet-rs); its files follow it: NAME.service,
#                    /usr/local/bin/NAME, /etc/default/NAME, /etc/NAME/config.yaml (a second
#                    instance beside the real one, as the systemd test installs)
#   --no-start       enable the unit but leave it as it is (not started, or still running the
#                    old binary until `systemctl restart NAME`)
#   --dest-root DIR  only write the files under DIR, as a package build does (no root, no
#                    systemd needed, no systemctl)
#   --uninstall      stop and disable the unit, remove it, its drop-in and the binary; pods keep
#                    running, and the config, environment file and state (/var/lib/kubelet-rs)
#                    stay. Remove the static pod manifests first to stop the pods.
#   --purge          with --uninstall: also remove /etc/default/NAME and /etc/NAME/
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SHIPPED="$KUBELET_RS_ROOT/deploy/systemd"
BIN_DIR=/usr/local/bin
UNIT_DIR=/etc/systemd/system
MANIFEST_DIR=/etc/kubernetes/manifests
DROP_IN=10-kubelet-rs.conf

usage() {
	sed -n '2,21s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

binary="$KUBELET_RS_ROOT/target/release/kubelet-rs"
name=kubelet-rs
start=1
dest=""
uninstall=0
purge=0
while (($# > 0)); do
	case "$1" in
	--binary)
		binary="${2:?--binary needs a file}"
		shift
		;;
	--name)
		name="${2:?--name needs a name}"
		shift
		;;
	--dest-root)
		dest="${2:?--dest-root needs a directory}"
		shift
		;;
	--no-start) start=0 ;;
	--uninstall) uninstall=1 ;;
	--purge) purge=1 ;;
	-h | --help) usage 0 ;;
	*)
		echo "unknown argument '$1'" >&2
		usage 2
		;;
	esac
	shift
done

# The name becomes file names and a unit name: keep it to what both accept.
[[ "$name" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]] || die "--name '$name': use letters, digits, '.', '_' and '-'"
((purge == 0 || uninstall == 1)) || die "--purge goes with --uninstall"
[[ -z "$dest" || "$dest" == /* ]] || dest="$PWD/$dest"

unit="$UNIT_DIR/$name.service"
drop_in_dir="$UNIT_DIR/$name.service.d"
installed_binary="$BIN_DIR/$name"
env_file="/etc/default/$name"
config_dir="/etc/$name"

# With --dest-root the files are only staged; otherwise this is the host's systemd.
if [[ -z "$dest" ]]; then
	require_root
	[[ -d /run/systemd/system ]] ||
		die "systemd is not PID 1 on this host (PID 1 is $(cat /proc/1/comm)): nothing to install into; --dest-root DIR only writes the files"
fi

# The shipped files name the default paths; an instance of another name gets its own.
render() {
	sed -e "s#/usr/local/bin/kubelet-rs#$installed_binary#g" \
		-e "s#/etc/default/kubelet-rs#$env_file#g" \
		-e "s#/etc/kubelet-rs/#$config_dir/#g" \
		-e "s#systemctl restart kubelet-rs#systemctl restart $name#g" \
		"$1"
}

# Writes stdin to a file of the staged or real tree, by rename: a reader (systemd, a running
# binary's exec) sees the old file or the new one, never half of one.
put() {
	local path="$dest$1" mode="$2"
	mkdir -p "$(dirname "$path")"
	cat >"$path.tmp.$$"
	chmod "$mode" "$path.tmp.$$"
	mv -f "$path.tmp.$$" "$path"
}

if ((uninstall)); then
	if [[ -z "$dest" ]]; then
		if [[ -e "$unit" ]]; then
			log "stopping and disabling $name.service (pods keep running)"
			systemctl disable --now "$name.service" || warn "systemctl disable --now $name.service failed"
		fi
	fi
	rm -f "$dest$unit" "$dest$drop_in_dir/$DROP_IN" "$dest$installed_binary"
	rmdir "$dest$drop_in_dir" 2>/dev/null || true
	if ((purge)); then
		rm -f "$dest$env_file" "$dest$config_dir/config.yaml"
		rmdir "$dest$config_dir" 2>/dev/null || true
	fi
	if [[ -z "$dest" ]]; then
		systemctl daemon-reload
		systemctl reset-failed "$name.service" 2>/dev/null || true
	fi
	if ((purge)); then
		log "removed $name.service, its drop-in, $installed_binary, $env_file and $config_dir"
	else
		log "removed $name.service, its drop-in and $installed_binary; kept $env_file and $config_dir (--purge removes them)"
	fi
	log "pods, their containerd records and the agent's state are left as they are"
	exit 0
fi

[[ -x "$binary" ]] || die "no agent binary at $binary: build it (cargo build --release) or pass --binary FILE"
# Runs on this host and is the agent, not some other file.
"$binary" --help >/dev/null || die "$binary --help failed: not a kubelet-rs binary for this host?"

# By rename: a running agent and its relays keep executing the old file.
put "$installed_binary" 0755 <"$binary"
render "$SHIPPED/kubelet-rs.service" | put "$unit" 0644
render "$SHIPPED/kubelet-rs.service.d/$DROP_IN" | put "$drop_in_dir/$DROP_IN" 0644
# The operator's files: written once, never overwritten.
if [[ ! -e "$dest$env_file" ]]; then
	render "$SHIPPED/kubelet-rs.env" | put "$env_file" 0644
else
	log "keeping $env_file"
fi
if [[ ! -e "$dest$config_dir/config.yaml" ]]; then
	render "$SHIPPED/config.yaml" | put "$config_dir/config.yaml" 0644
else
	log "keeping $config_dir/config.yaml"
fi
mkdir -p "$dest$MANIFEST_DIR"
log "installed $installed_binary, $unit and $drop_in_dir/$DROP_IN${dest:+ under $dest}"

[[ -z "$dest" ]] || exit 0
systemctl daemon-reload
systemctl enable "$name.service"
if ((start)); then
	# restart, not start: an upgrade must run the new binary. Pods keep running.
	systemctl restart "$name.service"
	log "$name.service started: systemctl status $name; journalctl -u $name -f"
else
	log "$name.service enabled, not (re)started: systemctl restart $name"
fi
