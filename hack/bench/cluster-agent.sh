# The agent under a cluster benchmark, kubelet-rs or the upstream kubelet, joined as node NODE
# to the control plane in DIR: sourced by hack/bench/cluster.sh and hack/bench/storage.sh
# after hack/lib.sh, with AGENT, NODE, DIR, PORT, RS_NS (kubelet-rs's containerd namespace)
# and POD_PREFIX (the start of the pods' names) set. kubelet-rs's state and log are in
# DIR/kubelet-rs/NODE, the upstream kubelet's in DIR/upstream/NODE
# (hack/bench/upstream-kubelet.sh). AGENT_PID, START_US and AGENT_LOG describe the running
# agent; WATCH_PIDS are the `kubectl get -w` processes to kill at the end.

AGENT_PID=""
WATCH_PIDS=()

# prepare_agent [IMAGE...]: kubectl, the agent's binary (kubelet-rs built in release unless
# NO_BUILD), and the pause and busybox images (and each IMAGE of hack/build-images.sh) where
# the agent looks for them.
prepare_agent() {
	K8S_BIN="$(hack/cluster/build.sh --print)"
	KUBECTL="$K8S_BIN/kubectl"
	[[ -x "$KUBECTL" ]] || die "no $KUBECTL; run hack/cluster/build.sh"
	if [[ "$AGENT" == kubelet-rs ]]; then
		if [[ -z "${NO_BUILD:-}" ]]; then
			require_cargo
			cargo build --release --quiet
		fi
		RS_BIN="$PWD/target/release/kubelet-rs"
		RS_STATE="$DIR/kubelet-rs/$NODE"
		[[ -x "$RS_BIN" ]] || die "no $RS_BIN"
		for img in pause busybox "$@"; do
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns images import --snapshotter overlayfs \
				"$KUBELET_RS_CACHE/images/$img.oci.tar" >/dev/null
		done
	else
		hack/bench/upstream-kubelet.sh prepare
		for img in "$@"; do
			ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n k8s.io images import \
				"$KUBELET_RS_CACHE/images/$img.oci.tar" >/dev/null
		done
	fi
}

now_us() { echo "${EPOCHREALTIME/./}"; }
kc() { "$KUBECTL" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }

start_agent() {
	if [[ "$AGENT" == upstream ]]; then
		hack/bench/upstream-kubelet.sh start "$NODE" --dir "$DIR" --port "$PORT" >/dev/null
		AGENT_PID="$(cat "$DIR/upstream/$NODE/kubelet.pid")"
		START_US="$(cat "$DIR/upstream/$NODE/started_us")"
		AGENT_LOG="$DIR/upstream/$NODE/kubelet.log"
	else
		local kubeconfig
		kubeconfig="$(hack/cluster/node-kubeconfig.sh "$NODE" --dir "$DIR")"
		if ! grep -q " $RS_STATE/" /proc/mounts; then rm -rf "$RS_STATE"; fi
		mkdir -p "$RS_STATE/root" "$RS_STATE/pod-logs"
		AGENT_LOG="$RS_STATE/agent.log"
		START_US="$(now_us)"
		"$RS_BIN" --kubeconfig "$kubeconfig" --hostname-override "$NODE" \
			--client-ca-file "$DIR/pki/ca.crt" --anonymous-auth=false \
			--authorization-mode Webhook --authentication-token-webhook \
			--root-dir "$RS_STATE/root" --pod-logs-dir "$RS_STATE/pod-logs" \
			--containerd-namespace "$RS_NS" --port "$PORT" --read-only-port 0 \
			--healthz-port $((PORT - 2)) \
			--image-gc-high-threshold 100 --image-gc-low-threshold 99 \
			>>"$AGENT_LOG" 2>&1 </dev/null &
		AGENT_PID=$!
		echo "$AGENT_PID" >"$RS_STATE/agent.pid"
	fi
}

# Running and not a zombie (kubelet-rs is this shell's child, reaped only by `wait`).
agent_alive() { pid_alive "$AGENT_PID"; }

stop_agent() {
	if [[ "$AGENT" == upstream ]]; then
		hack/bench/upstream-kubelet.sh stop "$NODE" --dir "$DIR" >/dev/null
	elif [[ -n "$AGENT_PID" ]]; then
		stop_pid "$AGENT_PID" kubelet-rs
	fi
	AGENT_PID=""
}

# stop_agent_clean: the agent stopped, then whatever containers of the pods it left removed.
stop_agent_clean() {
	stop_agent
	if [[ "$AGENT" == upstream ]]; then
		hack/bench/upstream-kubelet.sh clean "$POD_PREFIX"
	else
		local id ids
		ids="$(KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers ls -q 2>/dev/null)"
		for id in $ids; do
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns tasks kill -s SIGKILL "$id" >/dev/null 2>&1
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns tasks delete -f "$id" >/dev/null 2>&1
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers rm "$id" >/dev/null 2>&1 &&
				warn "removed left-over container $id in namespace $RS_NS"
		done
	fi
}

# Containers of the benchmark's pods still in containerd (the upstream kubelet removes a deleted
# pod's sandbox at its next container GC, about a minute later).
runtime_containers() {
	if [[ "$AGENT" == upstream ]]; then
		ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n k8s.io containers ls -q \
			"labels.\"io.kubernetes.pod.name\"~=^$POD_PREFIX" 2>/dev/null
	else
		KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers ls -q 2>/dev/null
	fi
}
wait_runtime_empty() {
	local deadline=$((SECONDS + $1))
	while [[ -n "$(runtime_containers)" ]]; do
		((SECONDS < deadline)) || { warn "containers of deleted pods still in containerd after $1s"; return 1; }
		sleep 1
	done
}

# watch_stamped FILE ARGS...: `kubectl get ARGS -w`, each event line prefixed with the
# microsecond it arrived.
watch_stamped() {
	local out="$1"
	shift
	: >"$out"
	# kubectl itself is the background job ($!), so killing it ends the stamping loop too.
	"$KUBECTL" --kubeconfig "$DIR/admin.kubeconfig" get "$@" -w --output-watch-events \
		> >(while IFS= read -r line; do printf '%s %s\n' "${EPOCHREALTIME/./}" "$line"; done >>"$out") &
	WATCH_PIDS+=($!)
}

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s.
wait_until() {
	local limit="$1" what="$2"
	local deadline=$((SECONDS + limit))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what; agent log: $AGENT_LOG"
		agent_alive || die "the agent exited; see $AGENT_LOG"
		sleep 0.1
	done
}
