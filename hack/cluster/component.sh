#!/usr/bin/env bash
# Stops or starts one component of the control plane hack/cluster/up.sh started, with the
# command line up.sh used: for fault tests (the apiserver gone for a minute, then back).
#
#   hack/cluster/component.sh stop|start NAME [--dir DIR]
#
# NAME is etcd, kube-apiserver, kube-controller-manager or kube-scheduler. `start` returns once
# the process runs (the caller waits for readiness as it needs); `stop` once it has exited.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

ACTION="${1:?usage: component.sh stop|start NAME [--dir DIR]}"
NAME="${2:?usage: component.sh stop|start NAME [--dir DIR]}"
DIR=/var/lib/kubelet-rs-cluster
[[ "${3:-}" == --dir ]] && DIR="$4"
PIDFILE="$DIR/run/$NAME.pid"
CMDFILE="$DIR/run/$NAME.cmd"
[[ -f "$CMDFILE" ]] || die "$NAME was not started by hack/cluster/up.sh in $DIR"

running() {
	local pid
	pid="$(cat "$PIDFILE" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null
}

case "$ACTION" in
stop)
	running || { log "$NAME is not running"; exit 0; }
	pid="$(cat "$PIDFILE")"
	kill "$pid"
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$PIDFILE"
	log "stopped $NAME"
	;;
start)
	running && { log "$NAME is already running"; exit 0; }
	mapfile -d '' cmd <"$CMDFILE"
	"${cmd[@]}" >>"$DIR/logs/$NAME.log" 2>&1 &
	echo $! >"$PIDFILE"
	log "started $NAME (pid $!)"
	;;
*) die "unknown action '$ACTION': stop or start" ;;
esac
