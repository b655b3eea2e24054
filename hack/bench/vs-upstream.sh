#!/usr/bin/env bash
# kubelet-rs against the upstream kubelet, side by side in one run: the same containerd, the
# same busybox and pause images, the same CNI config and the same static pods, one agent at a
# time, interleaved (A B, then B A, ...) so that both see the machine's drift alike. Prints a
# Markdown table with the ratio kubelet-rs / upstream for every figure; writes the raw samples
# as CSV and PNG charts into the output folder (printed at the end). Run by hand, as root, on a
# quiet machine: nothing in the test suite runs it or asserts a timing.
#
#   hack/bench/vs-upstream.sh [--rounds N] [--workloads "pods1 pods10 ..."] [--idle SECONDS]
#                             [--out DIR]
#
# Workloads (all by default): pods1, pods10, pods30, pods100 (that many pods of one busybox
# container each), pods30x3 (30 pods of three containers), probe30 (30 pods with an exec
# readiness probe every second). Every container runs `sh` waiting on a `sleep`, and leaves at
# once on SIGTERM, so teardown times the agents rather than a grace period.
#
# One run (an agent, a workload, a round), both agents standalone with static pods:
#  1. A fresh agent on an empty manifest folder (kubelet-rs: KUBELET_RS_BIN, namespace
#     krs-vs-bench; upstream: $(hack/cluster/build.sh --print)/kubelet through containerd's CRI
#     plugin, hack/bench/upstream-kubelet.sh --static-pods, namespace k8s.io). `ctr events`
#     records containerd's events from before the agent starts; after its healthz answers,
#     SETTLE_SECONDS pass so its own start-up is not in the figures.
#  2. Start-up: the manifests, written beforehand to a folder beside it, are moved in with one
#     mv; t0 is stamped just before. Done when containerd has started every task (sandboxes and
#     containers), counted from the event stream, so nothing polls the agents meanwhile. From
#     the events' own timestamps (containerd's clock, the same wall clock as t0): manifests
#     written -> the last app container's task started, and per pod -> its last app container
#     started (p50/p99 over all pods of all rounds). Which container is whose comes from the
#     agent's /pods afterwards.
#  3. CPU seconds during start-up (t0 until every task was seen started) and over IDLE_SECONDS
#     (after SETTLE_SECONDS more), user + system, children included (kubelet-rs runs the CNI
#     plugins itself, containerd runs them for the upstream kubelet; the shims reap runc): of the
#     agent, of containerd, of the run's shims, and of kubelet-rs's log writers (one process per
#     container, the agent binary started by the shim with a kubelet-rs-cri-logger argument; the
#     upstream kubelet has none: containerd's CRI plugin writes the logs itself). Memory at the
#     end of idle: PSS (/proc/PID/smaps_rollup; RSS counts a shared binary once per process)
#     of each group, the agent's peak RSS (VmHWM) at the end of start-up and of idle, and the
#     node-wide sum agent + log writers + shims + containerd. containerd is shared with
#     anything else on the machine: run nothing else.
#  4. Teardown: the manifests are removed (t stamped just before); done when every task of the
#     run has been deleted; figure: the last task delete's time. Then clean-up, not measured:
#     the agent removes the containers (the upstream kubelet at its next container GC, about a
#     minute later), pod cgroups, pod folders and pod log folders; the script waits for all of
#     that, then stops the agent, so neither agent inherits the other's leftovers.
# An interrupted run (Ctrl-C, a time-out, an error) removes its manifests and lets the agent
# tear the pods down, then stops it; what is still left is killed and removed through ctr.
#
# Output folder (default /var/lib/kubelet-rs-vs-upstream/<date-time>): samples.csv (round,
# agent, workload, metric, value: one row per sample, per pod for pod_start_ms), table.md,
# latency.png (per-pod start latency, an empirical CDF per workload), costs.png (agent RSS, PSS
# and CPU, node-wide PSS and CPU against the pod count), runs/ (each run's events, agent log
# and /pods). Nothing there belongs in the repository.
#
# Knobs (environment, or the flags above): ROUNDS (5), WORKLOADS (all), AGENTS ("kubelet-rs
# upstream"; one of them alone for a quick look at a change, without the ratios), IDLE_SECONDS (60),
# SETTLE_SECONDS (10), OUT, KUBELET_RS_BIN (default: target/release/kubelet-rs, built here
# unless NO_BUILD=1 or KUBELET_RS_BIN is set), VS_PORT (10760: kubelet-rs uses it and the next
# two, the upstream kubelet VS_PORT+9 to +11), START_TIMEOUT (600 s per start-up or teardown).
# Needs root, containerd, the test images (hack/build-images.sh), the upstream kubelet
# (hack/cluster/build.sh --kubelet builds it once, cached) and python3; matplotlib is installed with pip
# into $KUBELET_RS_CACHE/bench-venv when missing. The upstream kubelet kills every running CRI
# pod it does not know in containerd's k8s.io namespace: this script refuses to start while
# another upstream kubelet runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

ROUNDS="${ROUNDS:-5}"
AGENTS="${AGENTS:-kubelet-rs upstream}"
WORKLOADS="${WORKLOADS:-pods1 pods10 pods30 pods100 pods30x3 probe30}"
IDLE_SECONDS="${IDLE_SECONDS:-60}"
OUT="${OUT:-}"
while (($# > 0)); do
	case "$1" in
	--rounds) ROUNDS="$2"; shift ;;
	--workloads) WORKLOADS="$2"; shift ;;
	--idle) IDLE_SECONDS="$2"; shift ;;
	--out) OUT="$2"; shift ;;
	-h | --help) sed -n '2,62s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
SETTLE_SECONDS="${SETTLE_SECONDS:-10}"
START_TIMEOUT="${START_TIMEOUT:-600}"
VS_PORT="${VS_PORT:-10760}"
OUT="${OUT:-/var/lib/kubelet-rs-vs-upstream/$(date -u +%Y%m%d-%H%M%S)}"
RS_NS=krs-vs-bench
RS_NODE=vs-rs
UP_NODE=vs-upstream
# The upstream kubelet's pod cgroups go below this root, apart from kubelet-rs's /kubepods and
# from hack/bench/cluster.sh's upstream kubelet.
export UPSTREAM_CGROUP_ROOT=/krs-vs-upstream
POD_PREFIX=vs-
VENV="$KUBELET_RS_CACHE/bench-venv"

for w in $WORKLOADS; do
	case "$w" in
	pods1 | pods10 | pods30 | pods100 | pods30x3 | probe30) ;;
	*) die "unknown workload '$w' (see --help)" ;;
	esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive number"

require_root
require_cmd ctr curl jq python3 setsid
require_containerd

# Binaries: kubelet-rs (built unless given) and the upstream kubelet (built once, cached).
if [[ -z "${KUBELET_RS_BIN:-}" ]]; then
	KUBELET_RS_BIN="$PWD/target/release/kubelet-rs"
	if [[ -z "${NO_BUILD:-}" ]]; then
		require_cargo
		cargo build --release --quiet
	fi
fi
[[ -x "$KUBELET_RS_BIN" ]] || die "no kubelet-rs binary at $KUBELET_RS_BIN"
UPSTREAM_BIN="$(hack/cluster/build.sh --print)/kubelet"
[[ -x "$UPSTREAM_BIN" ]] || hack/cluster/build.sh --kubelet
[[ -x "$UPSTREAM_BIN" ]] || die "no upstream kubelet at $UPSTREAM_BIN after hack/cluster/build.sh --kubelet"

# matplotlib for the charts: the system's, else a venv of our own (checked before hours of runs).
PYTHON=python3
if ! python3 -c 'import matplotlib' 2>/dev/null; then
	if ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
		log "installing matplotlib into $VENV (pip, from PyPI)"
		{ python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet matplotlib; } ||
			die "could not install matplotlib into $VENV; install it (pip install matplotlib, or apt-get install python3-matplotlib) and run again"
	fi
	PYTHON="$VENV/bin/python"
fi
REPORT=(python3 hack/bench/vs_report.py)

# Another upstream kubelet would kill this benchmark's pods, and this one would kill its pods.
if pgrep -x kubelet >/dev/null; then
	die "an upstream kubelet is running (pids: $(pgrep -x kubelet | paste -sd' ')): stop it first, the two would kill each other's pods"
fi
hack/bench/upstream-kubelet.sh prepare
for img in pause busybox; do
	KUBELET_RS_NAMESPACE=$RS_NS ctr_ns images import --snapshotter overlayfs \
		"$KUBELET_RS_CACHE/images/$img.oci.tar" >/dev/null
done

mkdir -p "$OUT/runs"
WORK="$OUT/work"
CSV="$OUT/samples.csv"
echo "round,agent,workload,metric,value" >"$CSV"
HZ="$(getconf CLK_TCK)"

now_us() { echo "${EPOCHREALTIME/./}"; }

# The current run's state (cleanup reads it).
AGENT=""
AGENT_PID=""
EVENTS_PID=""
RUN=""
MANIFESTS=""
NS=""

# "count cpu_seconds rss_kib pss_kib" of the given pids: CPU is user + system of each process
# and of its reaped children; PSS only when MEM=1 (it walks the page tables). Pure bash, so
# reading a hundred processes forks nothing.
proc_stats() {
	local pid line n=0 ticks=0 rss=0 pss=0 k v rest
	local -a f
	for pid in "$@"; do
		read -r line 2>/dev/null </proc/"$pid"/stat || continue
		rest="${line##*) }"
		read -ra f <<<"$rest"
		# f[0] is field 3 (state): utime, stime, cutime, cstime are fields 14 to 17.
		ticks=$((ticks + f[11] + f[12] + f[13] + f[14]))
		n=$((n + 1))
		if [[ "${MEM:-0}" == 1 ]]; then
			while read -r k v _; do
				[[ "$k" == VmRSS: ]] && rss=$((rss + v))
			done 2>/dev/null </proc/"$pid"/status || true
			while read -r k v _; do
				[[ "$k" == Pss: ]] && pss=$((pss + v))
			done 2>/dev/null </proc/"$pid"/smaps_rollup || true
		fi
	done
	echo "$n $(awk -v t="$ticks" -v hz="$HZ" 'BEGIN { printf "%.2f", t / hz }') $rss $pss"
}
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# Container ids whose task started in this run, from the event stream.
started_ids() {
	awk -v ns="$NS" '$5 == ns && $6 == "/tasks/start" && match($0, /"container_id":"[^"]*"/) {
		print substr($0, RSTART + 16, RLENGTH - 17) }' "$RUN/events" | sort -u
}
started_count() { started_ids | wc -l; }
# Tasks of this run deleted (a delete naming a process other than the task's own is an exec's).
deleted_count() {
	awk -v ns="$NS" '$5 == ns && $6 == "/tasks/delete" && match($0, /"container_id":"[^"]*"/) {
		cid = substr($0, RSTART + 16, RLENGTH - 17)
		if (match($0, /"id":"[^"]*"/) && substr($0, RSTART + 6, RLENGTH - 7) != cid) next
		print cid }' "$RUN/events" | sort -u | wc -l
}

# Pids of this run's shims (named by their sandbox's id) and of kubelet-rs's log writers (whose
# arguments name a log under this run's pod log folder).
shim_pids() {
	ps -eo pid=,args= | awk -v ns="$NS" -v ids="$RUN/started" '
		BEGIN { while ((getline id <ids) > 0) want[id] = 1 }
		$2 ~ /containerd-shim/ {
			for (i = 3; i < NF; i++) {
				if ($i == "-namespace") n = $(i + 1)
				if ($i == "-id") s = $(i + 1)
			}
			if (n == ns && (s in want)) print $1
			n = ""; s = ""
		}'
}
logger_pids() {
	[[ "$AGENT" == kubelet-rs ]] || return 0
	ps -eo pid=,args= | awk -v d="$RS_LOGS/" '/kubelet-rs-cri-logger/ && index($0, d) { print $1 }'
}

agent_alive() { pid_alive "$AGENT_PID"; }

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 0.2 s while the agent lives.
wait_until() {
	local limit="$1" what="$2"
	local deadline=$((SECONDS + limit))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what ($AGENT; log: $RUN/agent.log)"
		agent_alive || die "$AGENT exited while waiting for $what; see $RUN/agent.log"
		sleep 0.2
	done
}
# A sleep that a signal interrupts at once (bash runs traps only between commands).
pause_for() {
	sleep "$1" &
	wait $!
}

RS_STATE="$WORK/kubelet-rs"
RS_LOGS="$RS_STATE/pod-logs"
UP_STATE="$WORK/upstream/$UP_NODE"

start_agent() {
	local port
	if [[ "$AGENT" == kubelet-rs ]]; then
		port=$VS_PORT
		if grep -q " $RS_STATE/" /proc/mounts; then
			die "mounts left under $RS_STATE (see /proc/mounts)"
		fi
		rm -rf "$RS_STATE"
		mkdir -p "$RS_STATE/manifests" "$RS_STATE/stage" "$RS_STATE/root" "$RS_LOGS"
		MANIFESTS="$RS_STATE/manifests"
		# Its own session, so a Ctrl-C meant for this script does not stop it before it tore
		# its pods down.
		setsid "$KUBELET_RS_BIN" --pod-manifest-path "$MANIFESTS" --root-dir "$RS_STATE/root" \
			--pod-logs-dir "$RS_LOGS" --containerd-namespace "$RS_NS" --hostname-override "$RS_NODE" \
			--address 127.0.0.1 --read-only-port "$port" --port $((port + 1)) --healthz-port $((port + 2)) \
			--image-gc-high-threshold 100 --image-gc-low-threshold 99 \
			>"$RUN/agent.log" 2>&1 </dev/null &
		AGENT_PID=$!
		READ_ONLY="http://127.0.0.1:$port"
		HEALTHZ="http://127.0.0.1:$((port + 2))/healthz"
	else
		port=$((VS_PORT + 11))
		rm -rf "$UP_STATE/manifests" "$UP_STATE/stage"
		mkdir -p "$UP_STATE/manifests" "$UP_STATE/stage"
		MANIFESTS="$UP_STATE/manifests"
		setsid hack/bench/upstream-kubelet.sh start "$UP_NODE" --dir "$WORK" --port "$port" \
			--static-pods "$MANIFESTS" --read-only-port $((port - 1)) >/dev/null
		AGENT_PID="$(cat "$UP_STATE/kubelet.pid")"
		READ_ONLY="http://127.0.0.1:$((port - 1))"
		HEALTHZ="http://127.0.0.1:$((port - 2))/healthz"
	fi
	wait_until 120 "the agent's healthz" curl -sf -o /dev/null "$HEALTHZ"
}

stop_agent() {
	if [[ "$AGENT" == upstream ]]; then
		hack/bench/upstream-kubelet.sh stop "$UP_NODE" --dir "$WORK" >/dev/null
		[[ -f "$UP_STATE/kubelet.log" ]] && mv "$UP_STATE/kubelet.log" "$RUN/agent.log"
	elif [[ -n "$AGENT_PID" ]]; then
		stop_pid "$AGENT_PID" kubelet-rs
	fi
	AGENT_PID=""
}

# The manifests of one run into the staging folder beside the manifest folder.
write_manifests() {
	local workload="$1" dir="$2" pods containers probe="" i c
	case "$workload" in
	pods*x3) pods=${workload#pods}; pods=${pods%x3}; containers=3 ;;
	pods*) pods=${workload#pods}; containers=1 ;;
	probe*) pods=${workload#probe}; containers=1
		probe="
    readinessProbe: {exec: {command: [\"true\"]}, periodSeconds: 1}" ;;
	esac
	PODS=$pods
	CONTAINERS=$containers
	for ((i = 0; i < pods; i++)); do
		{
			cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $POD_PREFIX$i
spec:
  terminationGracePeriodSeconds: 10
  containers:
YAML
			for ((c = 0; c < containers; c++)); do
				cat <<YAML
  - name: c$c
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 360000 & wait"]$probe
YAML
			done
		} >"$dir/$POD_PREFIX$i.yaml"
	done
}

# What the agent's pods leave behind: their containers in containerd, their cgroups, pod
# folders and pod log folders. Prints one line per thing left; nothing when clean.
leftovers() {
	local uids="$RUN/uids"
	if [[ "$AGENT" == kubelet-rs ]]; then
		KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers ls -q 2>/dev/null | sed 's/^/container /'
		[[ -d "$RS_STATE/root/pods" ]] && find "$RS_STATE/root/pods" -mindepth 1 -maxdepth 1 | sed 's/^/pod folder /'
		find "$RS_LOGS" -mindepth 1 -maxdepth 1 2>/dev/null | sed 's/^/pod log folder /'
	else
		ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n k8s.io containers ls -q \
			"labels.\"io.kubernetes.pod.name\"~=^$POD_PREFIX" 2>/dev/null | sed 's/^/container /'
		[[ -d "$UP_STATE/root/pods" ]] && find "$UP_STATE/root/pods" -mindepth 1 -maxdepth 1 | sed 's/^/pod folder /'
		find "$UP_STATE/pod-logs" -mindepth 1 -maxdepth 1 2>/dev/null | sed 's/^/pod log folder /'
	fi
	if [[ -s "$uids" ]]; then
		find /sys/fs/cgroup -maxdepth 6 -type d -name 'pod*' 2>/dev/null | grep -F -f "$uids" | sed 's/^/cgroup /'
	fi
	return 0
}
clean() { [[ -z "$(leftovers)" ]]; }

# Removes what an interrupted run left once its agent is gone: tasks and containers through
# ctr (the CRI plugin forgets its records of them at containerd's next start), empty pod
# cgroups, pod folders without mounts below them.
force_clean() {
	local what id
	while read -r what id; do
		case "$what" in
		container)
			local -a c=(ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$NS")
			"${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
			"${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
			"${c[@]}" containers rm "$id" >/dev/null 2>&1 && warn "removed left-over container $id" ;;
		cgroup)
			find "$id" -depth -type d -exec rmdir {} + 2>/dev/null && warn "removed left-over cgroup $id" ;;
		pod)
			# "pod folder PATH" / "pod log folder PATH"
			id="${id#folder }"
			id="${id#log folder }"
			grep -q " $id/" /proc/mounts || rm -rf "$id" ;;
		esac
	done < <(leftovers)
	return 0
}

# Ends the current run however far it got: its pods torn down through the agent when it still
# runs (with the upstream kubelet's container GC), then the agent stopped.
end_run() {
	[[ -n "$AGENT" ]] || return 0
	set +e
	# Interrupted before the pods' UIDs were read: read them now, for the cgroup checks.
	if [[ ! -s "$RUN/uids" ]] && agent_alive; then
		curl -sf "${READ_ONLY:-}/pods" | jq -r '.items[].metadata.uid' >"$RUN/uids" 2>/dev/null
	fi
	[[ -n "$MANIFESTS" ]] && rm -f "$MANIFESTS"/*.yaml
	if agent_alive; then
		local deadline=$((SECONDS + 240))
		until clean; do
			((SECONDS < deadline)) || { warn "$AGENT did not clean its pods up within 240 s:"; leftovers | head -20 >&2; break; }
			agent_alive || break
			sleep 1
		done
	fi
	stop_agent
	force_clean
	[[ -n "$EVENTS_PID" ]] && kill "$EVENTS_PID" 2>/dev/null
	wait "$EVENTS_PID" 2>/dev/null
	EVENTS_PID=""
	AGENT=""
	set -e
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$AGENT" ]]; then
		log "cleaning up the interrupted run ($AGENT, $RUN)"
		end_run
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# sample METRIC VALUE: one CSV row of the current run.
sample() { echo "$ROUND,$AGENT,$WORKLOAD,$1,$2" >>"$CSV"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
add() { awk 'BEGIN { s = 0; for (i = 1; i < ARGC; i++) s += ARGV[i]; printf "%.2f", s }' "$@"; }

all_started() { (($(started_count) >= EXPECTED)); }
all_deleted() { (($(deleted_count) >= $(wc -l <"$RUN/started"))); }

# run_one AGENT WORKLOAD ROUND
run_one() {
	AGENT="$1"
	WORKLOAD="$2"
	ROUND="$3"
	RUN="$OUT/runs/$ROUND-$WORKLOAD-$AGENT"
	mkdir -p "$RUN"
	if [[ "$AGENT" == kubelet-rs ]]; then NS=$RS_NS; else NS=k8s.io; fi
	: >"$RUN/uids"
	ctr --address "$CONTAINERD_SOCKET" events >"$RUN/events" 2>&1 &
	EVENTS_PID=$!
	start_agent
	write_manifests "$WORKLOAD" "${MANIFESTS%/manifests}/stage"
	EXPECTED=$((PODS * (CONTAINERS + 1)))
	pause_for "$SETTLE_SECONDS"
	local containerd_pid a0 d0 t0 a1 d1 shims loggers s1 l1
	containerd_pid="$(pgrep -xo containerd)"
	read -r _ a0 _ _ <<<"$(proc_stats "$AGENT_PID")"
	read -r _ d0 _ _ <<<"$(proc_stats "$containerd_pid")"

	# Start-up.
	t0="$(now_us)"
	mv "${MANIFESTS%/manifests}/stage/"*.yaml "$MANIFESTS/"
	wait_until "$START_TIMEOUT" "$EXPECTED tasks started" all_started
	read -r _ a1 _ _ <<<"$(proc_stats "$AGENT_PID")"
	read -r _ d1 _ _ <<<"$(proc_stats "$containerd_pid")"
	sample agent_hwm_startup_mib "$(mib "$(status_kb "$AGENT_PID" VmHWM)")"
	started_ids >"$RUN/started"
	mapfile -t shims < <(shim_pids)
	mapfile -t loggers < <(logger_pids)
	# The shims and log writers were born in this window: all their CPU so far is start-up.
	read -r _ s1 _ _ <<<"$(proc_stats "${shims[@]}")"
	read -r _ l1 _ _ <<<"$(proc_stats "${loggers[@]}")"
	sample agent_cpu_startup_s "$(minus "$a0" "$a1")"
	sample containerd_cpu_startup_s "$(minus "$d0" "$d1")"
	sample shims_cpu_startup_s "$s1"
	sample loggers_cpu_startup_s "$l1"
	sample node_cpu_startup_s "$(add "$(minus "$a0" "$a1")" "$(minus "$d0" "$d1")" "$s1" "$l1")"
	log "round $ROUND, $WORKLOAD, $AGENT: $EXPECTED tasks started; ${SETTLE_SECONDS}s settle, ${IDLE_SECONDS}s idle"

	# Idle.
	pause_for "$SETTLE_SECONDS"
	local ia0 id0 is0 il0 ia1 id1 is1 il1 n_s n_l rss_a pss_a pss_s pss_l pss_d rss_s rss_l rss_d
	read -r _ ia0 _ _ <<<"$(proc_stats "$AGENT_PID")"
	read -r _ id0 _ _ <<<"$(proc_stats "$containerd_pid")"
	read -r _ is0 _ _ <<<"$(proc_stats "${shims[@]}")"
	read -r _ il0 _ _ <<<"$(proc_stats "${loggers[@]}")"
	pause_for "$IDLE_SECONDS"
	agent_alive || die "$AGENT exited; see $RUN/agent.log"
	read -r _ ia1 rss_a pss_a <<<"$(MEM=1 proc_stats "$AGENT_PID")"
	read -r _ id1 rss_d pss_d <<<"$(MEM=1 proc_stats "$containerd_pid")"
	read -r n_s is1 rss_s pss_s <<<"$(MEM=1 proc_stats "${shims[@]}")"
	read -r n_l il1 rss_l pss_l <<<"$(MEM=1 proc_stats "${loggers[@]}")"
	sample agent_cpu_idle_s "$(minus "$ia0" "$ia1")"
	sample containerd_cpu_idle_s "$(minus "$id0" "$id1")"
	sample shims_cpu_idle_s "$(minus "$is0" "$is1")"
	sample loggers_cpu_idle_s "$(minus "$il0" "$il1")"
	sample node_cpu_idle_s "$(add "$(minus "$ia0" "$ia1")" "$(minus "$id0" "$id1")" "$(minus "$is0" "$is1")" "$(minus "$il0" "$il1")")"
	sample agent_hwm_mib "$(mib "$(status_kb "$AGENT_PID" VmHWM)")"
	sample agent_rss_mib "$(mib "$rss_a")"
	sample agent_pss_mib "$(mib "$pss_a")"
	sample containerd_rss_mib "$(mib "$rss_d")"
	sample containerd_pss_mib "$(mib "$pss_d")"
	sample shims "$n_s"
	sample shims_rss_mib "$(mib "$rss_s")"
	sample shims_pss_mib "$(mib "$pss_s")"
	sample loggers "$n_l"
	sample loggers_rss_mib "$(mib "$rss_l")"
	sample loggers_pss_mib "$(mib "$pss_l")"
	sample node_pss_mib "$(mib $((pss_a + pss_d + pss_s + pss_l)))"

	# Which container is whose, and the pods' UIDs (for the clean-up checks).
	curl -sf "$READ_ONLY/pods" >"$RUN/pods.json" || die "$AGENT's /pods did not answer"
	jq -r '.items[] | .metadata.name as $n | .status.containerStatuses[]? | select(.containerID != null)
		| (.containerID | sub("^[a-z]+://"; "")) + " " + $n' "$RUN/pods.json" >"$RUN/containers"
	jq -r '.items[].metadata.uid' "$RUN/pods.json" >"$RUN/uids"
	[[ "$(wc -l <"$RUN/containers")" -eq $((PODS * CONTAINERS)) ]] ||
		warn "$AGENT's /pods lists $(wc -l <"$RUN/containers") containers, not $((PODS * CONTAINERS))"

	# Teardown.
	local td
	td="$(now_us)"
	rm -f "$MANIFESTS"/*.yaml
	wait_until "$START_TIMEOUT" "every task of the run deleted" all_deleted
	local rows
	rows="$("${REPORT[@]}" events --events "$RUN/events" --namespace "$NS" --containers "$RUN/containers" \
		--t0-us "$t0" --teardown-us "$td")"
	awk -v p="$ROUND,$AGENT,$WORKLOAD," 'NF { print p $0 }' <<<"$rows" >>"$CSV"
	log "round $ROUND, $WORKLOAD, $AGENT: $(grep -E '^(startup|teardown)_ms,' <<<"$rows" | tr ',\n' '= ')"

	# Clean-up (not measured): the agent removes everything, then it is stopped.
	wait_until 300 "$AGENT to remove its pods' containers, cgroups and folders" clean
	end_run
}

log "output in $OUT; rounds: $ROUNDS; workloads: $WORKLOADS; ${IDLE_SECONDS}s idle per run"
T_START=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
	for w in $WORKLOADS; do
		# A B in odd rounds, B A in even ones, so neither always runs first.
		if ((r % 2)); then order="kubelet-rs upstream"; else order="upstream kubelet-rs"; fi
		for a in $order; do
			[[ " $AGENTS " == *" $a "* ]] || continue
			run_one "$a" "$w" "$r"
		done
	done
done

{
	echo "### kubelet-rs vs the upstream kubelet $("$UPSTREAM_BIN" --version 2>/dev/null | awk '{ print $2 }'), standalone, $ROUNDS rounds"
	echo
	echo "$(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr), containerd $(ctr version 2>/dev/null | awk '/Version:/ { print $2; exit }'), cgroup $([[ -f /sys/fs/cgroup/cgroup.controllers ]] && echo v2 || echo v1); idle window ${IDLE_SECONDS}s; kubelet-rs: $KUBELET_RS_BIN of $(date -u -r "$KUBELET_RS_BIN" '+%F %R UTC'); $(((SECONDS - T_START) / 60)) min in all."
	"${REPORT[@]}" report --csv "$CSV"
} >"$OUT/table.md"
"$PYTHON" hack/bench/vs_report.py report --csv "$CSV" --charts "$OUT" >/dev/null
rm -rf "$WORK"
echo
cat "$OUT/table.md"
echo
log "raw samples: $CSV; charts: $OUT/latency.png $OUT/costs.png; per-run logs and events: $OUT/runs"
