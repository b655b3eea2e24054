#!/usr/bin/env bash
# Brings this machine up as a standalone node and runs kubelet-rs on the pods in examples/:
# node set-up, a release build, the test images, then the agent with the kubelet's own flags.
#
#   hack/local-up.sh                  run the agent in the foreground (Ctrl-C stops it)
#   hack/local-up.sh --background     run it in the background; prints its PID and log
#   hack/local-up.sh --cluster        also start a control plane (hack/cluster/up.sh) and join it
#   hack/local-up.sh --down           stop the quick start: its agent, its pods, its control plane
#   hack/local-up.sh -- --v 4 ...     extra flags for kubelet-rs
#
# The quick start listens on loopback only: the read-only port 10255 (unauthenticated, as
# upstream's) and 10250 with anonymous requests refused (--address 127.0.0.1
# --anonymous-auth=false). With --cluster, 10250 listens on every address as on a kubeadm node
# (the apiserver's client certificate, token review and Webhook authorization; metrics-server
# reaches it through the bridge) and the read-only port is off.
#
# An agent stopped with SIGTERM leaves its pods running, as the kubelet does; --down also
# removes them (it runs the agent once more on an empty manifest folder until they are gone),
# so that hack/test.sh finds the ports and containerd's kubelet-rs namespace free.
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
# What --down needs to know of the running quick start (see write_state).
STATE_FILE="${KUBELET_RS_LOCAL_UP_STATE:-/run/kubelet-rs-local-up.env}"
READ_ONLY_PORT=10255
BINARY="$KUBELET_RS_ROOT/target/release/kubelet-rs"

usage() {
	sed -n '2,24s/^# \{0,1\}//p' "$0"
	exit "${1:-0}"
}

background=0
cluster=0
down=0
extra_flags=()
while (($# > 0)); do
	case "$1" in
	-d | --background) background=1 ;;
	--cluster) cluster=1 ;;
	--down) down=1 ;;
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

# The quick start as started: binary, containerd namespace, extra flags, control plane dir.
write_state() {
	local state_cluster_dir="$1"
	mkdir -p "$(dirname "$STATE_FILE")"
	{
		declare -p BINARY KUBELET_RS_NAMESPACE extra_flags
		printf 'state_cluster_dir=%q\n' "$state_cluster_dir"
	} >"$STATE_FILE"
}

# Pod containers (sandboxes included) of kubelet-rs in the namespace.
pod_containers() {
	ctr_ns containers ls -q 'labels."kubelet-rs.io/kind"' 2>/dev/null || true
}

# --down: stops the agent (pid file), then removes its pods by running the agent once more on
# an empty manifest folder: at start it finds the earlier pods, none of which a source claims,
# and stops and removes them (containers, sandboxes, CNI, cgroups, logs) as it removes any pod.
# Then the control plane, if --cluster started one. Each step says what it did.
down() {
	local state_cluster_dir="" pid
	if [[ -f "$STATE_FILE" ]]; then
		# shellcheck source=/dev/null
		source "$STATE_FILE"
	fi
	if pid="$(running_pid)"; then
		log "stopping the quick start's agent (pid $pid, pid file $PIDFILE); its pods keep running until removed below"
		stop_pid "$pid" "kubelet-rs (pid $pid)"
	fi
	rm -f "$PIDFILE"
	require_containerd
	local pods
	pods="$(pod_containers)"
	if [[ -n "$pods" ]]; then
		[[ -x "$BINARY" ]] || die "$(wc -l <<<"$pods") pod container(s) remain in containerd namespace $KUBELET_RS_NAMESPACE, and $BINARY (the agent that would remove them) is missing: cargo build --release, then run this again"
		log "removing $(wc -l <<<"$pods") pod container(s) of the quick start from containerd namespace $KUBELET_RS_NAMESPACE (the agent on an empty manifest folder; its log: $AGENT_LOG)"
		local empty cleanup_flags cleaner deadline=$((SECONDS + 180))
		empty="$(mktemp -d)"
		cleanup_flags=("${extra_flags[@]}" --pod-manifest-path "$empty" --address 127.0.0.1
			--anonymous-auth=false --read-only-port 0 --healthz-port 0 --v 2)
		if [[ "$KUBELET_RS_NAMESPACE" != kubelet-rs ]]; then
			cleanup_flags+=(--containerd-namespace "$KUBELET_RS_NAMESPACE")
		fi
		# In this process group: a Ctrl-C here stops it too.
		"$BINARY" "${cleanup_flags[@]}" >>"$AGENT_LOG" 2>&1 </dev/null &
		cleaner=$!
		while [[ -n "$(pod_containers)" ]] && ((SECONDS < deadline)); do
			pid_alive "$cleaner" || break
			sleep 1
		done
		stop_pid "$cleaner" "the clean-up agent (pid $cleaner)"
		rmdir "$empty" 2>/dev/null || true
		pods="$(pod_containers)"
		[[ -z "$pods" ]] || die "$(wc -l <<<"$pods") pod container(s) still in containerd namespace $KUBELET_RS_NAMESPACE after the clean-up agent ran; last lines of $AGENT_LOG:
$(tail -n 20 "$AGENT_LOG")"
		log "the quick start's pods are gone"
	fi
	if [[ -n "$state_cluster_dir" ]]; then
		log "stopping the quick start's control plane ($state_cluster_dir)"
		"$KUBELET_RS_ROOT/hack/cluster/down.sh" --dir "$state_cluster_dir"
	fi
	rm -f "$STATE_FILE"
	log "quick start stopped; start it again with: hack/local-up.sh --background"
}

require_root
if ((down)); then
	down
	exit 0
fi
if pid="$(running_pid)"; then
	log "kubelet-rs already running (pid $pid, log $AGENT_LOG); stop it with: hack/local-up.sh --down"
	((cluster)) || log "try: curl -s localhost:$READ_ONLY_PORT/pods"
	exit 0
fi

"$KUBELET_RS_ROOT/hack/setup-node.sh"
require_cargo
log "building kubelet-rs (release)"
(cd "$KUBELET_RS_ROOT" && cargo build --release --bin kubelet-rs)
# The release binary imports the test images too (no second, debug build).
KUBELET_RS_BIN="$BINARY" "$KUBELET_RS_ROOT/hack/build-images.sh"

flags=(--pod-manifest-path "$MANIFESTS" --v 2)
if [[ "$KUBELET_RS_NAMESPACE" != kubelet-rs ]]; then
	flags+=(--containerd-namespace "$KUBELET_RS_NAMESPACE")
fi
# Without --config the kubelet's flag defaults let anyone who reaches 10250 in
# (anonymous, AlwaysAllow: exec and run in every container) on every address; the quick
# start refuses anonymous requests on every port it opens and keeps the unauthenticated ones
# on loopback.
flags+=(--anonymous-auth=false)
if ((cluster)); then
	flags+=(--read-only-port 0)
else
	flags+=(--address 127.0.0.1 --read-only-port "$READ_ONLY_PORT")
fi
quick_start_cluster_dir=""
if ((cluster)); then
	CLUSTER_DIR=/var/lib/kubelet-rs-cluster
	quick_start_cluster_dir="$CLUSTER_DIR"
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
write_state "$quick_start_cluster_dir"

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
	((cluster)) || log "try: curl -s localhost:$READ_ONLY_PORT/pods"
	log "stop the agent: kill $pid (its pods keep running); the agent and its pods: hack/local-up.sh --down"
else
	log "starting: $BINARY ${flags[*]}"
	((cluster)) || log "in another shell try: curl -s localhost:$READ_ONLY_PORT/pods"
	log "Ctrl-C stops the agent, not its pods; hack/local-up.sh --down removes them"
	# exec keeps this PID: the pid file names the agent, so --down (and hack/test.sh) find it.
	mkdir -p "$(dirname "$PIDFILE")"
	echo "$$" >"$PIDFILE"
	exec "$BINARY" "${flags[@]}"
fi
