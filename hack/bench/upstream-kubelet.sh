#!/usr/bin/env bash
# Starts and stops the upstream kubelet (built by hack/cluster/build.sh --kubelet) as its own node on a
# control plane from hack/cluster/up.sh, through containerd's CRI plugin: the reference that
# hack/bench/cluster.sh compares kubelet-rs with.
#
#   hack/bench/upstream-kubelet.sh prepare                    containerd and images for the CRI plugin
#   hack/bench/upstream-kubelet.sh start NAME [--dir DIR] [--port N]
#   hack/bench/upstream-kubelet.sh start NAME --static-pods MANIFESTS [--dir DIR] [--port N]
#                                  [--read-only-port N]
#   hack/bench/upstream-kubelet.sh stop NAME [--dir DIR]      SIGTERM (SIGKILL after 20 s)
#   hack/bench/upstream-kubelet.sh clean PREFIX               remove containers left of pods named PREFIX*
#
# prepare (start runs it too) is idempotent: it adds `restrict_oom_score_adj = true` under
# [plugins."io.containerd.grpc.v1.cri"] in /etc/containerd/config.toml (no CAP_SYS_RESOURCE
# here: without it every sandbox fails in runc) and restarts containerd only when that changed
# the file (running containers survive a restart), starts containerd if it is not running, and
# imports the pause and busybox images into the `k8s.io` namespace, the pause image also under
# the name the CRI plugin asks for (registry.k8s.io/pause:3.6 in containerd 1.6).
#
# start gives NAME its identity (hack/cluster/node-kubeconfig.sh) and runs the kubelet in the
# background with its own state in DIR/upstream/NAME (--root-dir, the KubeletConfiguration,
# kubelet.log, kubelet.pid, and started_us: the wall clock in microseconds just before the
# kubelet was started). DIR defaults to /var/lib/kubelet-rs-cluster; --port (default 10250 +
# 300) is the main server, the healthz port is the one below it, the read-only port is off.
#
# Unlike the upstream default, the kubelet's cgroup root is UPSTREAM_CGROUP_ROOT (default
# /krs-bench-upstream) and its pod logs go to DIR/upstream/NAME/pod-logs: the upstream kubelet
# kills the processes of pod cgroups under its kubepods it does not know and removes pod log
# folders it does not know, which would hit kubelet-rs pods (/kubepods, /var/log/pods) running
# beside it. UPSTREAM_CGROUP_ROOT=/ gives the upstream layout (then run nothing else).
#
# --static-pods MANIFESTS runs it standalone instead (hack/bench/vs-upstream.sh): no
# --kubeconfig and no control plane, its pods are the manifests in MANIFESTS (staticPodPath), and
# its servers listen on 127.0.0.1 only, without authentication (anonymous, AlwaysAllow), with the
# read-only port at --read-only-port (default off) for /pods. The upstream kubelet kills every
# running CRI pod in the k8s.io namespace it does not know, so run one upstream kubelet at a time.
#
# Eviction: only memory.available < 1Mi. With evictionHard given, the kubelet sets no disk
# thresholds, so it never evicts pods, taints the node DiskPressure or deletes unused images
# (the pause image among them: containerd 1.6 does not pin it) when the shared disk runs low;
# and imageGCHighThresholdPercent 100 turns image GC off.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

CONTAINERD_CONFIG="${CONTAINERD_CONFIG:-/etc/containerd/config.toml}"
CONTAINERD_LOG=/var/log/containerd.log
CRI_SECTION='[plugins."io.containerd.grpc.v1.cri"]'
CRI_PAUSE_IMAGE="${CRI_PAUSE_IMAGE:-registry.k8s.io/pause:3.6}"
UPSTREAM_CGROUP_ROOT="${UPSTREAM_CGROUP_ROOT:-/krs-bench-upstream}"

ctr_k8s() { ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n k8s.io "$@"; }

# Adds restrict_oom_score_adj = true to the CRI plugin's section; 0 when the file changed.
configure_cri() {
	local cfg="$CONTAINERD_CONFIG"
	if [[ -f "$cfg" ]] && awk -v s="$CRI_SECTION" '
		/^[[:space:]]*\[/ { in_cri = ($1 == s) }
		in_cri && /^[[:space:]]*restrict_oom_score_adj[[:space:]]*=[[:space:]]*true/ { found = 1 }
		END { exit !found }' "$cfg"; then
		return 1
	fi
	[[ -f "$cfg" ]] || { mkdir -p "$(dirname "$cfg")" && echo 'version = 2' >"$cfg"; }
	grep -qF "$CRI_SECTION" "$cfg" || printf '\n[plugins]\n  %s\n' "$CRI_SECTION" >>"$cfg"
	grep -qE '^[[:space:]]*restrict_oom_score_adj[[:space:]]*=' "$cfg" &&
		die "$cfg sets restrict_oom_score_adj to something other than true; set it to true under $CRI_SECTION by hand"
	cp "$cfg" "$cfg.bak-krs-bench"
	awk -v s="$CRI_SECTION" '{ print } $1 == s && !done { print "    restrict_oom_score_adj = true"; done = 1 }' \
		"$cfg.bak-krs-bench" >"$cfg.tmp"
	mv "$cfg.tmp" "$cfg"
	log "containerd: added restrict_oom_score_adj = true under $CRI_SECTION in $cfg (was kept as $cfg.bak-krs-bench)"
	return 0
}

start_containerd_if_down() {
	containerd_answers && return 0
	if ! pgrep -x containerd >/dev/null; then
		log "containerd: not running; starting it in the background (log: $CONTAINERD_LOG)"
		setsid nohup containerd >>"$CONTAINERD_LOG" 2>&1 </dev/null &
	fi
	local i
	for ((i = 0; i < 60; i++)); do
		containerd_answers && return 0
		sleep 0.5
	done
	die "containerd did not answer on $CONTAINERD_SOCKET within 30 s; see $CONTAINERD_LOG"
}

restart_containerd() {
	local pid
	pid="$(pgrep -xo containerd || true)"
	if [[ -n "$pid" ]]; then
		log "containerd: restarting (pid $pid) for the new configuration; running containers survive"
		kill "$pid"
		wait_gone "$pid" 20 || die "containerd (pid $pid) did not stop within 20 s"
	fi
	start_containerd_if_down
}

cri_ready() { ctr --address "$CONTAINERD_SOCKET" plugins ls 2>/dev/null | awk '$2 == "cri" && $NF == "ok" { f = 1 } END { exit !f }'; }

prepare() {
	require_root
	require_cmd ctr containerd
	if configure_cri; then
		restart_containerd
	else
		start_containerd_if_down
	fi
	cri_ready || die "containerd's CRI plugin is not loaded (ctr plugins ls); see $CONTAINERD_LOG"
	local img
	for img in pause busybox; do
		[[ -f "$KUBELET_RS_CACHE/images/$img.oci.tar" ]] || die "no $KUBELET_RS_CACHE/images/$img.oci.tar; run hack/build-images.sh"
	done
	# (the list in a variable first: grep -q closing the pipe would fail ctr under pipefail)
	local images
	images="$(ctr_k8s images ls -q)"
	grep -qxF docker.io/library/busybox:1.36 <<<"$images" ||
		ctr_k8s images import "$KUBELET_RS_CACHE/images/busybox.oci.tar" >/dev/null
	if ! grep -qxF "$CRI_PAUSE_IMAGE" <<<"$images"; then
		grep -qxF registry.k8s.io/pause:3.10 <<<"$images" ||
			ctr_k8s images import "$KUBELET_RS_CACHE/images/pause.oci.tar" >/dev/null
		ctr_k8s images tag registry.k8s.io/pause:3.10 "$CRI_PAUSE_IMAGE" >/dev/null
	fi
	# The CRI plugin's image store is filled from containerd's when it starts; a tag made by
	# ctr after that reaches it through its event subscription, usually within a second.
}

# The cgroup root must exist in every v1 hierarchy the kubelet uses (on v2, the one tree).
make_cgroup_root() {
	local root="${UPSTREAM_CGROUP_ROOT%/}" d
	[[ -n "$root" ]] || return 0
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		mkdir -p "/sys/fs/cgroup$root"
		return 0
	fi
	for d in /sys/fs/cgroup/*/; do
		[[ "$d" == */unified/ ]] && continue
		[[ -f "$d/cgroup.procs" ]] || continue
		mkdir -p "$d${root#/}"
	done
	# A new v1 cpuset is empty; copy the parent's so children can hold tasks.
	local cs=/sys/fs/cgroup/cpuset
	if [[ -d "$cs${root}" ]]; then
		[[ -n "$(cat "$cs${root}/cpuset.cpus")" ]] || cat "$cs/cpuset.cpus" >"$cs${root}/cpuset.cpus"
		[[ -n "$(cat "$cs${root}/cpuset.mems")" ]] || cat "$cs/cpuset.mems" >"$cs${root}/cpuset.mems"
	fi
}

# The kubelet bind-mounts its root dir onto itself (to make it a shared mount) and leaves that
# mount when it exits; undo it once nothing is mounted below it.
unmount_root() {
	grep -q " $STATE/root/" /proc/mounts && return 0
	# Busy for a moment while the kubelet's last processes exit: a few tries, then leave it.
	local tries=0
	while mountpoint -q "$STATE/root" 2>/dev/null; do
		umount "$STATE/root" 2>/dev/null && continue
		((++tries < 20)) || { warn "$STATE/root is still busy; left mounted"; return 0; }
		sleep 0.5
	done
}

parse_node_args() {
	NAME="${1:?usage: upstream-kubelet.sh start|stop|clean NAME [--dir DIR] [--port N] [--static-pods DIR]}"
	shift
	DIR=/var/lib/kubelet-rs-cluster
	PORT=10550
	STATIC_PODS=""
	READ_ONLY_PORT=0
	while (($# > 0)); do
		case "$1" in
		--dir) DIR="$2"; shift ;;
		--port) PORT="$2"; shift ;;
		--static-pods) STATIC_PODS="$2"; shift ;;
		--read-only-port) READ_ONLY_PORT="$2"; shift ;;
		*) die "unknown argument '$1' (see --help)" ;;
		esac
		shift
	done
	STATE="$DIR/upstream/$NAME"
}

start() {
	parse_node_args "$@"
	prepare
	if [[ -z "$STATIC_PODS" ]]; then
		[[ -f "$DIR/env" ]] || die "no control plane in $DIR; run hack/cluster/up.sh --dir $DIR first"
	else
		[[ -d "$STATIC_PODS" ]] || die "no manifest folder $STATIC_PODS"
	fi
	local bin kubeconfig="" pid
	bin="$("$KUBELET_RS_ROOT/hack/cluster/build.sh" --print)/kubelet"
	[[ -x "$bin" ]] || "$KUBELET_RS_ROOT/hack/cluster/build.sh" --kubelet
	[[ -x "$bin" ]] || die "no upstream kubelet at $bin after hack/cluster/build.sh --kubelet"
	# pid_alive, not kill -0: a kubelet killed with SIGKILL may stay a zombie (its parent, this
	# script, is gone, and PID 1 need not reap it).
	if pid="$(cat "$STATE/kubelet.pid" 2>/dev/null)" && pid_alive "$pid"; then
		die "the upstream kubelet for $NAME is already running (pid $pid)"
	fi
	if [[ -z "$STATIC_PODS" ]]; then
		kubeconfig="$("$KUBELET_RS_ROOT/hack/cluster/node-kubeconfig.sh" "$NAME" --dir "$DIR")"
	fi
	make_cgroup_root
	# A fresh root dir each start (pods without volumes leave no mounts; never remove through one).
	unmount_root
	if grep -q " $STATE/" /proc/mounts; then
		warn "mounts left under $STATE; keeping its root dir"
	else
		rm -rf "$STATE/root" "$STATE/pod-logs"
	fi
	mkdir -p "$STATE/root" "$STATE/pod-logs"
	cat >"$STATE/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CONTAINERD_SOCKET
cgroupDriver: cgroupfs
cgroupRoot: $UPSTREAM_CGROUP_ROOT
failSwapOn: false
enforceNodeAllocatable: []
evictionHard:
  memory.available: 1Mi
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
port: $PORT
healthzBindAddress: 127.0.0.1
healthzPort: $((PORT - 2))
podLogsDir: $STATE/pod-logs
YAML
	if [[ -n "$STATIC_PODS" ]]; then
		cat >>"$STATE/config.yaml" <<YAML
staticPodPath: $STATIC_PODS
address: 127.0.0.1
readOnlyPort: $READ_ONLY_PORT
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
YAML
	else
		cat >>"$STATE/config.yaml" <<YAML
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $DIR/pki/ca.crt
authorization:
  mode: Webhook
YAML
	fi
	rm -f "$STATE/kubelet.pid"
	local args=(--config "$STATE/config.yaml" --hostname-override "$NAME" --root-dir "$STATE/root")
	[[ -z "$kubeconfig" ]] || args+=(--kubeconfig "$kubeconfig")
	echo "${EPOCHREALTIME/./}" >"$STATE/started_us"
	"$bin" "${args[@]}" >>"$STATE/kubelet.log" 2>&1 </dev/null &
	echo $! >"$STATE/kubelet.pid"
	log "upstream kubelet for node $NAME: pid $!, state and log in $STATE"
}

stop() {
	parse_node_args "$@"
	local pid
	pid="$(cat "$STATE/kubelet.pid" 2>/dev/null)" || { log "no upstream kubelet for $NAME"; return 0; }
	rm -f "$STATE/kubelet.pid"
	pid_alive "$pid" || return 0
	stop_pid "$pid" "upstream kubelet (pid $pid)"
	unmount_root
	log "stopped the upstream kubelet for $NAME (pid $pid)"
}

# Last resort once the kubelet is stopped: containers of pods named PREFIX* that the kubelet
# did not remove (it removes a deleted pod's sandbox about a minute after the pod is gone).
# The CRI plugin forgets their records at its next start.
clean() {
	local prefix="${1:?usage: upstream-kubelet.sh clean POD_NAME_PREFIX}" ids id
	containerd_answers || return 0
	ids="$(ctr_k8s containers ls -q "labels.\"io.kubernetes.pod.name\"~=^$prefix" 2>/dev/null || true)"
	for id in $ids; do
		ctr_k8s tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
	done
	local netns
	for id in $ids; do
		# A sandbox's network namespace is pinned under /run/netns by the CRI plugin, which
		# unpins it only through RemovePodSandbox: removed here, it would stay pinned (and
		# the agent tests that need /run/netns free of pins would wait on it).
		netns="$(ctr_k8s containers info "$id" 2>/dev/null |
			awk '/"type": "network"/ { getline; if ($1 == "\"path\":") { gsub(/[",]/, "", $2); print $2 } }')"
		ctr_k8s tasks delete -f "$id" >/dev/null 2>&1 || true
		if ctr_k8s containers rm "$id" >/dev/null 2>&1; then
			warn "removed left-over CRI container $id"
		fi
		netns="${netns/#\/var\/run\//\/run\/}"
		if [[ "$netns" == /run/netns/cni-* ]] && grep -q " $netns " /proc/self/mounts; then
			umount "$netns" && rm -f "$netns" && warn "unpinned its network namespace $netns"
		fi
	done
	return 0
}

case "${1:-}" in
prepare) prepare ;;
start | stop | clean) cmd="$1"; shift; "$cmd" "$@" ;;
-h | --help) sed -n '2,41s/^# \{0,1\}//p' "$0" ;;
*) die "usage: upstream-kubelet.sh prepare|start|stop|clean ... (see --help)" ;;
esac
