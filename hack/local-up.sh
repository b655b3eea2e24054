#!/usr/bin/env bash
# Brings this machine up as a standalone node and runs kubelet-rs on the pods in examples/:
# node set-up, a release build, the test images, then the agent with the kubelet's own flags.
#
#   hack/local-up.sh                  run the agent in the foreground (Ctrl-C stops it)
#   hack/local-up.sh --background     run it in the background; prints its PID and log
#   hack/local-up.sh --cluster        also start a control plane (hack/cluster/up.sh) and join it
#   hack/local-up.sh -- --v 4 ...     extra flags for kubelet-rs
#
# Environment: KUBELET_RS_MANIFESTS (default examples/), KUBELET_RS_LOG
# (default /var/log/kubelet-rs.log), KUBELET_RS_PIDFILE (default /run/kubelet-rs.pid),
# KUBELET_RS_NODE_NAME (default kubelet-rs-node; with --cluster).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MANIFESTS="${KUBELET_RS_MANIFESTS:-$KUBELET_RS_ROOT/examples}"
AGENT_LOG="${KUBELET_RS_LOG:-/var/log/kubelet-rs.log}"
PIDFILE="${KUBELET_RS_PIDFILE:-/run/kubelet-rs.pid}"
READ_ONLY_PORT=10255
BINARY="$KUBELET_RS_ROOT/target/release/kubelet-rs"

usage() {
	sed -n '2,13s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

background=0
cluster=0
extra_flags=()
while (($# > 0)); do
	case "$1" in
	-d | --background) background=1 ;;
	--cluster) cluster=1 ;;
	-h | --help) usage 0 ;;
	--)
		shift
		extra_flags=("$@")
		break
		;;
	*)
		echo "unknown argument '$1'" >&2
		usage 2
		;;
	esac
	shift
done

running_pid() {
	local pid
	pid="$(cat "$PIDFILE" 2>/dev/null)" || return 1
	[[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == kubelet-rs ]] || return 1
	echo "$pid"
}

require_root
if pid="$(running_pid)"; then
	log "kubelet-rs already running (pid $pid, log $AGENT_LOG); stop it with: kill $pid"
	log "try: curl -s localhost:$READ_ONLY_PORT/pods"
	exit 0
fi

"$KUBELET_RS_ROOT/hack/setup-node.sh"
require_cargo
log "building kubelet-rs (release)"
(cd "$KUBELET_RS_ROOT" && cargo build --release --bin kubelet-rs)
# The release binary imports the test images too (no second, debug build).
KUBELET_RS_BIN="$BINARY" "$KUBELET_RS_ROOT/hack/build-images.sh"

flags=(--pod-manifest-path "$MANIFESTS" --read-only-port "$READ_ONLY_PORT" --v 2)
if [[ "$KUBELET_RS_NAMESPACE" != kubelet-rs ]]; then
	flags+=(--containerd-namespace "$KUBELET_RS_NAMESPACE")
fi
if ((cluster)); then
	CLUSTER_DIR=/var/lib/kubelet-rs-cluster
	NODE_NAME="${KUBELET_RS_NODE_NAME:-kubelet-rs-node}"
	"$KUBELET_RS_ROOT/hack/cluster/up.sh" --dir "$CLUSTER_DIR"
	node_kubeconfig="$("$KUBELET_RS_ROOT/hack/cluster/node-kubeconfig.sh" "$NODE_NAME" --dir "$CLUSTER_DIR")"
	# The apiserver reaches the node with its kubelet client certificate, signed by the cluster
	# CA; the agent asks the apiserver whether that user may (Webhook), as a kubeadm node does.
	flags+=(--kubeconfig "$node_kubeconfig" --hostname-override "$NODE_NAME"
		--client-ca-file "$CLUSTER_DIR/pki/ca.crt" --authorization-mode Webhook
		--authentication-token-webhook)
	log "control plane up; kubectl: source $CLUSTER_DIR/env && \$KUBECTL get nodes"
	log "stop the control plane with: hack/cluster/down.sh"
fi
flags+=("${extra_flags[@]}")

if ((background)); then
	mkdir -p "$(dirname "$AGENT_LOG")" "$(dirname "$PIDFILE")"
	# setsid: the agent outlives this shell and its process group.
	setsid nohup "$BINARY" "${flags[@]}" >>"$AGENT_LOG" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$PIDFILE"
	sleep 1
	kill -0 "$pid" 2>/dev/null || die "kubelet-rs exited at once; last lines of $AGENT_LOG:
$(tail -n 20 "$AGENT_LOG")"
	log "kubelet-rs running in the background: pid $pid, log $AGENT_LOG, pid file $PIDFILE"
	log "try: curl -s localhost:$READ_ONLY_PORT/pods"
	log "stop: kill $pid"
else
	log "starting: $BINARY ${flags[*]}"
	log "in another shell try: curl -s localhost:$READ_ONLY_PORT/pods"
	exec "$BINARY" "${flags[@]}"
fi
