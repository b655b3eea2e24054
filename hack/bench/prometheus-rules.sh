#!/usr/bin/env bash
# kube-prometheus-stack's CPU and memory recording rules (hack/prometheus/rules.yaml) on the
# same workload, first on kubelet-rs, then on the upstream kubelet (hack/bench/upstream-kubelet.sh,
# through containerd's CRI plugin), each joined as its own node to one control plane of this
# script's (hack/cluster/up.sh), each scraped by a fresh real Prometheus (hack/prometheus/build.sh)
# configured as the stack's kubelet ServiceMonitor generates (hack/prometheus/config.sh), with a
# ServiceAccount's bearer token, and kube-state-metrics for the rules' joins. Prints the rules'
# values side by side with their ratio, and beside each what the container's own cgroup says
# over the same span (the agents run one after the other on a shared machine: the cgroup column
# tells a difference of the workload from one of the reporting).
#
#   hack/bench/prometheus-rules.sh [--dir DIR] [--port-offset N] [--agents "kubelet-rs upstream"]
#
# The workload, in namespace default, pinned to the node:
#   krs-prom-spin  one container `spin` in a busy loop, CPU limit (and request) 500m, with an
#                  exec readiness probe every 10 s (so /metrics/probes has its series);
#   krs-prom-mem   container `cache` writes a 200 MiB file into a memory-backed emptyDir (page
#                  cache: working set and container_memory_cache), container `anon` holds
#                  100 MiB of anonymous memory (container_memory_rss): dd's 100 MiB buffer,
#                  filled from /dev/zero, blocked writing it to a pipe nobody reads (CPU request
#                  100m each: a BestEffort container's 2 CPU shares starve on a busy machine).
# Once both pods are Running and their memory is in place, the script waits SETTLE_SECONDS (300:
# rate5m's window full, as a younger series reads low),
# then reads the rules SAMPLES times (6) SAMPLE_SECONDS apart (30); the table gives the median
# of the readings. The cgroup column: CPU over the span of rate5m's last window (cpuacct.usage
# read at each reading), memory at the last reading (memory.stat: total_rss, total_cache,
# total_swap; working set = memory.usage_in_bytes - total_inactive_file, as cAdvisor computes it).
# The stack's cadvisor metricRelabelings drop container_memory_swap; it is kept here
# (config.sh --keep-swap) so the swap rule has values to compare.
#
# It also runs `promtool check metrics` on each endpoint's body of each agent (fetched with the
# same token) and prints the findings side by side: DIR/prom-bench/<agent>/promtool-<endpoint>.
#
# Knobs: SETTLE_SECONDS, SAMPLES, SAMPLE_SECONDS, NO_BUILD=1 (no `cargo build --release`),
# KUBELET_RS_BIN (another kubelet-rs binary, e.g. target/debug/kubelet-rs; no build), KEEP_CLUSTER=1. Needs root, containerd, the test images (hack/build-images.sh), the Kubernetes
# binaries (hack/cluster/build.sh) and the Prometheus ones (hack/prometheus/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

DIR=/var/lib/kubelet-rs-bench-prometheus
OFFSET=300
AGENTS="kubelet-rs upstream"
while (($# > 0)); do
	case "$1" in
	--dir) DIR="$2"; shift ;;
	--port-offset) OFFSET="$2"; shift ;;
	--agents) AGENTS="$2"; shift ;;
	-h | --help) sed -n '2,35s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

SETTLE_SECONDS="${SETTLE_SECONDS:-300}"
SAMPLES="${SAMPLES:-6}"
SAMPLE_SECONDS="${SAMPLE_SECONDS:-30}"
# Ports of this script's own, moved with the offset (kubelet 10560 and healthz 10558 by default,
# beside hack/bench/cluster.sh's 10550).
KUBELET_PORT=$((10260 + OFFSET))
KSM_PORT=$((8080 + OFFSET))
PROM_PORT=$((9090 + OFFSET))
RS_NS=krs-bench-prom
PREFIX=krs-prom-
MON_NS=monitoring

require_root
require_cmd ctr curl awk
require_containerd

K8S_BIN="$(hack/cluster/build.sh --print)"
KUBECTL="$K8S_BIN/kubectl"
[[ -x "$KUBECTL" ]] || die "no $KUBECTL; run hack/cluster/build.sh"
hack/prometheus/build.sh
{ read -r PROM_BIN; read -r KSM_BIN; } < <(hack/prometheus/build.sh --print)
if [[ " $AGENTS " == *" kubelet-rs "* ]]; then
	RS_BIN="${KUBELET_RS_BIN:-$PWD/target/release/kubelet-rs}"
	if [[ -z "${NO_BUILD:-}" && -z "${KUBELET_RS_BIN:-}" ]]; then
		require_cargo
		cargo build --release --quiet
	fi
	[[ -x "$RS_BIN" ]] || die "no $RS_BIN"
	for img in pause busybox; do
		KUBELET_RS_NAMESPACE=$RS_NS ctr_ns images import --snapshotter overlayfs \
			"$KUBELET_RS_CACHE/images/$img.oci.tar" >/dev/null
	done
fi
[[ " $AGENTS " != *" upstream "* ]] || hack/bench/upstream-kubelet.sh prepare

kc() { "$KUBECTL" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }
now_s() { date +%s.%N; }

AGENT="" AGENT_PID="" NODE="" PROM_PID="" KSM_PID=""
stop_agent() {
	if [[ "$AGENT" == upstream ]]; then
		hack/bench/upstream-kubelet.sh stop "$NODE" --dir "$DIR" >/dev/null
		hack/bench/upstream-kubelet.sh clean "$PREFIX"
	elif [[ -n "$AGENT_PID" ]]; then
		stop_pid "$AGENT_PID" kubelet-rs
		local id
		for id in $(KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers ls -q 2>/dev/null); do
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns tasks kill -s SIGKILL "$id" >/dev/null 2>&1
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns tasks delete -f "$id" >/dev/null 2>&1
			KUBELET_RS_NAMESPACE=$RS_NS ctr_ns containers rm "$id" >/dev/null 2>&1 &&
				warn "removed left-over container $id in namespace $RS_NS"
		done
	fi
	AGENT_PID=""
}
stop_prometheus() {
	[[ -z "$PROM_PID" ]] || stop_pid "$PROM_PID" prometheus
	PROM_PID=""
}
cleanup() {
	local rc=$?
	set +e
	trap - EXIT
	log "cleaning up"
	stop_prometheus
	if [[ -n "$AGENT" ]] && [[ "$AGENT" == upstream || -n "$AGENT_PID" ]]; then
		kc delete pods -l app=krs-prom --wait=true --timeout=120s >/dev/null 2>&1
		stop_agent
	fi
	[[ -z "$KSM_PID" ]] || stop_pid "$KSM_PID" kube-state-metrics
	[[ -n "${KEEP_CLUSTER:-}" ]] || hack/cluster/down.sh --dir "$DIR" >/dev/null
	exit "$rc"
}
trap cleanup EXIT

wait_for() {
	local limit="$1" what="$2" deadline
	deadline=$((SECONDS + limit))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what"
		sleep 1
	done
}

hack/cluster/up.sh --dir "$DIR" --port-offset "$OFFSET"
OUT="$DIR/prom-bench"
rm -rf "$OUT"
mkdir -p "$OUT"

# The stack's Prometheus identity: a ServiceAccount and the chart's ClusterRole
# (templates/prometheus/clusterrole.yaml: nodes and nodes/metrics, /metrics and
# /metrics/cadvisor), bound to it, and a token for it as a projected volume would hold.
kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $MON_NS}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: $MON_NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: krs-prom-bench-prometheus}
rules:
- apiGroups: [""]
  resources: [nodes, nodes/metrics, services, endpoints, pods]
  verbs: [get, list, watch]
- nonResourceURLs: [/metrics, /metrics/cadvisor]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: krs-prom-bench-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: krs-prom-bench-prometheus}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: $MON_NS}
YAML
kc -n "$MON_NS" create token prometheus --duration=2h >"$OUT/token"
chmod 600 "$OUT/token"

# kube-state-metrics for kube_pod_info and kube_pod_owner, on loopback.
"$KSM_BIN/kube-state-metrics" --kubeconfig "$DIR/admin.kubeconfig" --resources pods,replicasets \
	--host 127.0.0.1 --port "$KSM_PORT" --telemetry-host 127.0.0.1 --telemetry-port $((KSM_PORT + 1)) \
	>"$OUT/kube-state-metrics.log" 2>&1 &
KSM_PID=$!
wait_for 60 "kube-state-metrics" curl -sf "http://127.0.0.1:$KSM_PORT/healthz" -o /dev/null

node_ready() { [[ "$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; }
node_untainted() { [[ -z "$(kc get node "$NODE" -o jsonpath='{.spec.taints}')" ]]; }

start_agent() {
	if [[ "$AGENT" == upstream ]]; then
		NODE=bench-prom-upstream
		hack/bench/upstream-kubelet.sh start "$NODE" --dir "$DIR" --port "$KUBELET_PORT" >/dev/null
		AGENT_LOG="$DIR/upstream/$NODE/kubelet.log"
	else
		NODE=bench-prom-rs
		local kubeconfig state="$DIR/kubelet-rs/bench-prom-rs"
		kubeconfig="$(hack/cluster/node-kubeconfig.sh "$NODE" --dir "$DIR")"
		if ! grep -q " $state/" /proc/mounts; then rm -rf "$state"; fi
		mkdir -p "$state/root" "$state/pod-logs"
		AGENT_LOG="$state/agent.log"
		"$RS_BIN" --kubeconfig "$kubeconfig" --hostname-override "$NODE" \
			--client-ca-file "$DIR/pki/ca.crt" --anonymous-auth=false \
			--authorization-mode Webhook --authentication-token-webhook \
			--root-dir "$state/root" --pod-logs-dir "$state/pod-logs" \
			--containerd-namespace "$RS_NS" --port "$KUBELET_PORT" --read-only-port 0 \
			--healthz-port $((KUBELET_PORT - 2)) \
			--eviction-hard 'memory.available<100Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%' \
			--image-gc-high-threshold 100 --image-gc-low-threshold 99 \
			>>"$AGENT_LOG" 2>&1 </dev/null &
		AGENT_PID=$!
	fi
	wait_for 180 "node $NODE Ready (log: $AGENT_LOG)" node_ready
	wait_for 120 "node $NODE untainted" node_untainted
}

create_pods() {
	kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: ${PREFIX}spin, namespace: default, labels: {app: krs-prom}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE}
  containers:
  - name: spin
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "while :; do :; done"]
    resources:
      requests: {cpu: 500m}
      limits: {cpu: 500m}
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 10
---
apiVersion: v1
kind: Pod
metadata: {name: ${PREFIX}mem, namespace: default, labels: {app: krs-prom}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE}
  volumes: [{name: m, emptyDir: {medium: Memory}}]
  containers:
  - name: cache
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "dd if=/dev/zero of=/m/fill bs=1M count=200 && echo filled && exec sleep 3600"]
    resources: {requests: {cpu: 100m}}
    volumeMounts: [{name: m, mountPath: /m}]
  - name: anon
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "echo held; dd if=/dev/zero bs=104857600 count=1 | exec sleep 3600"]
    resources: {requests: {cpu: 100m}}
YAML
	kc wait --for=condition=Ready "pod/${PREFIX}spin" "pod/${PREFIX}mem" --timeout=180s >/dev/null
	if ! wait_for_quiet 180 mem_in_place; then
		kc get pod "${PREFIX}mem" -o jsonpath='{.status.containerStatuses}' >&2
		kc logs "${PREFIX}mem" -c cache >&2
		kc logs "${PREFIX}mem" -c anon >&2
		die "the mem pod's memory was not in place within 180s (agent log: $AGENT_LOG)"
	fi
}
# wait_for_quiet SECONDS COMMAND...: true once COMMAND is, false after SECONDS.
wait_for_quiet() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}
mem_in_place() {
	[[ "$(kc logs "${PREFIX}mem" -c cache 2>/dev/null)" == *filled* ]] &&
		[[ "$(kc logs "${PREFIX}mem" -c anon 2>/dev/null)" == *held* ]]
}

# The cgroup (relative to each v1 hierarchy, or the v2 tree) of POD's CONTAINER, from its OCI
# spec in containerd: the agent's namespace, or the CRI plugin's k8s.io.
container_cgroup() {
	local ns="$RS_NS" id
	[[ "$AGENT" != upstream ]] || ns=k8s.io
	id="$(ctr --address "$CONTAINERD_SOCKET" -n "$ns" containers ls -q \
		"labels.\"io.kubernetes.pod.name\"==$1,labels.\"io.kubernetes.container.name\"==$2" | head -1)"
	[[ -n "$id" ]] || die "no container $2 of pod $1 in containerd namespace $ns"
	ctr --address "$CONTAINERD_SOCKET" -n "$ns" containers info "$id" |
		awk -F'"' '/"cgroupsPath"/ { print $4; exit }'
}
cg_file() {
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		echo "/sys/fs/cgroup$1/$3"
	else
		echo "/sys/fs/cgroup/$2$1/$3"
	fi
}
# CPU seconds the cgroup used so far.
cg_cpu() {
	local f
	f="$(cg_file "$1" cpuacct cpuacct.usage)"
	if [[ -f "$f" ]]; then
		awk '{ printf "%.6f", $1 / 1e9 }' "$f"
	else
		awk '$1 == "usage_usec" { printf "%.6f", $2 / 1e6 }' "$(cg_file "$1" "" cpu.stat)"
	fi
}
# KEY of memory.stat (v1 names: total_rss, total_cache, total_swap, total_inactive_file).
cg_mem_stat() {
	local f v2
	f="$(cg_file "$1" memory memory.stat)"
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		case "$2" in
		total_rss) v2=anon ;; total_cache) v2=file ;; total_inactive_file) v2=inactive_file ;;
		total_swap) cat "$(cg_file "$1" "" memory.swap.current)" 2>/dev/null || echo 0; return ;;
		esac
		awk -v k="$v2" '$1 == k { print $2 }' "$f"
	else
		awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$f"
	fi
}
cg_mem_usage() {
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		cat "$(cg_file "$1" "" memory.current)"
	else
		cat "$(cg_file "$1" memory memory.usage_in_bytes)"
	fi
}

# query EXPR [TIME]: the instant vector as "pod container value" lines (value as printed).
query() {
	local args=(--data-urlencode "query=$1")
	[[ -z "${2:-}" ]] || args+=(--data-urlencode "time=$2")
	curl -sf --get "${args[@]}" "http://127.0.0.1:$PROM_PORT/api/v1/query" |
		python3 -c '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    m = r["metric"]
    print(m.get("pod", "-"), m.get("container", m.get("workload", "-")), r["value"][1])
'
}

RULES=(
	"node_namespace_pod_container:container_cpu_usage_seconds_total:sum_irate"
	"node_namespace_pod_container:container_cpu_usage_seconds_total:sum_rate5m"
	"node_namespace_pod_container:container_memory_working_set_bytes"
	"node_namespace_pod_container:container_memory_rss"
	"node_namespace_pod_container:container_memory_cache"
	"node_namespace_pod_container:container_memory_swap"
)
# The workload-level CPU the stack's "Compute Resources / Workload" dashboard shows: the irate
# rule joined with namespace_workload_pod:kube_pod_owner:relabel.
WORKLOAD_CPU='sum by (namespace, workload) (node_namespace_pod_container:container_cpu_usage_seconds_total:sum_irate{namespace="default"} * on (namespace, pod) group_left(workload, workload_type) namespace_workload_pod:kube_pod_owner:relabel{namespace="default"})'

prom_ready() { curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" -o /dev/null; }
# Every kubelet endpoint and kube-state-metrics up, and each rule with a value for the pods.
all_up() {
	[[ "$(query 'sum(up{job=~"kubelet|kube-state-metrics"})')" == "- - 5" ]] || return 1
	local r
	for r in "${RULES[@]}"; do
		[[ -n "$(query "$r{pod=~\"$PREFIX.*\"}")" ]] || return 1
	done
}

run_agent() {
	AGENT="$1"
	local out="$OUT/$AGENT" i t cg c key pod container
	mkdir -p "$out"
	log "== $AGENT"
	start_agent
	create_pods
	hack/prometheus/config.sh --kubelet "127.0.0.1:$KUBELET_PORT" --node "$NODE" \
		--token-file "$OUT/token" --ca-file "$DIR/pki/ca.crt" --ksm "127.0.0.1:$KSM_PORT" \
		--rules "$PWD/hack/prometheus/rules.yaml" --keep-swap >"$out/prometheus.yml"
	"$PROM_BIN/promtool" check config "$out/prometheus.yml" >/dev/null
	"$PROM_BIN/prometheus" --config.file "$out/prometheus.yml" --storage.tsdb.path "$out/tsdb" \
		--web.listen-address "127.0.0.1:$PROM_PORT" >"$out/prometheus.log" 2>&1 &
	PROM_PID=$!
	wait_for 60 "Prometheus ready" prom_ready
	wait_for 240 "every target up and every rule answering (Prometheus: $out/prometheus.log)" all_up
	log "$AGENT: all targets up; settling ${SETTLE_SECONDS}s, then $SAMPLES readings ${SAMPLE_SECONDS}s apart"

	declare -A cgroups=()
	for c in spin/spin mem/cache mem/anon; do
		cgroups[$c]="$(container_cgroup "$PREFIX${c%/*}" "${c#*/}")"
	done
	sleep "$SETTLE_SECONDS"
	: >"$out/readings" >"$out/cpu-truth"
	for ((i = 0; i < SAMPLES; i++)); do
		((i == 0)) || sleep "$SAMPLE_SECONDS"
		t="$(now_s)"
		for c in "${!cgroups[@]}"; do
			echo "$t $c $(cg_cpu "${cgroups[$c]}")" >>"$out/cpu-truth"
		done
		for r in "${RULES[@]}"; do
			query "$r{pod=~\"$PREFIX.*\"}" "$t" | awk -v r="$r" '{ print r, $1 "/" $2, $3 }' >>"$out/readings"
		done
		query "$WORKLOAD_CPU" "$t" | awk '{ print "workload_cpu", $2, $3 }' >>"$out/readings"
	done
	# The cgroup's truth: CPU over the 5 minutes before the last reading (rate5m's window; or
	# the span of the readings when shorter), memory now.
	: >"$out/truth"
	for c in "${!cgroups[@]}"; do
		awk -v c="$c" '$2 == c { t[++n] = $1; u[n] = $3 }
			END { f = 1; for (i = 1; i < n; i++) if (t[n] - t[i] <= 300) { f = i; break }
			      if (n > 1) printf "cpu %s %.4f\n", c, (u[n] - u[f]) / (t[n] - t[f]) }' \
			"$out/cpu-truth" >>"$out/truth"
		cg="${cgroups[$c]}"
		echo "working_set $c $(($(cg_mem_usage "$cg") - $(cg_mem_stat "$cg" total_inactive_file)))" >>"$out/truth"
		for key in rss cache swap; do
			echo "$key $c $(cg_mem_stat "$cg" "total_$key")" >>"$out/truth"
		done
	done

	# promtool on every endpoint, fetched with the token.
	local ep name
	for ep in /metrics /metrics/cadvisor /metrics/probes /metrics/resource; do
		name="${ep#/}"
		name="${name//\//-}"
		curl -sfk -H "Authorization: Bearer $(cat "$OUT/token")" "https://127.0.0.1:$KUBELET_PORT$ep" >"$out/$name.txt"
		"$PROM_BIN/promtool" check metrics <"$out/$name.txt" >"$out/promtool-$name" 2>&1 || true
	done

	stop_prometheus
	kc delete pods -l app=krs-prom --wait=true --timeout=120s >/dev/null
	stop_agent
	AGENT=""
}

for a in $AGENTS; do run_agent "$a"; done

# Medians of the readings: "rule pod/container median".
medians() {
	awk '{ k = $1 " " $2; v[k] = v[k] " " $3 } END { for (k in v) print k, v[k] }' "$OUT/$1/readings" |
		while read -r rule key vals; do
			echo "$rule $key $(tr ' ' '\n' <<<"$vals" | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }')"
		done
}
for a in $AGENTS; do medians "$a" >"$OUT/$a/medians"; done

truth_key() {
	case "$1" in
	*cpu_usage*) echo cpu ;; *working_set*) echo working_set ;; *_rss) echo rss ;;
	*_cache) echo cache ;; *_swap) echo swap ;; *) echo - ;;
	esac
}
fmt() {
	case "$1" in
	*cpu*) awk -v v="$2" 'BEGIN { if (v == "") print "-"; else printf "%.3f", v }' ;;
	*) awk -v v="$2" 'BEGIN { if (v == "") print "-"; else printf "%.1f Mi", v / 1048576 }' ;;
	esac
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.3f", a / b }'; }
lookup() { awk -v r="$2" -v k="$3" '$1 == r && $2 == k { print $3 }' "$1" 2>/dev/null; }

read -r -a agents <<<"$AGENTS"
echo
echo "### kube-prometheus-stack recording rules: ${agents[*]} ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "Prometheus $("$PROM_BIN/prometheus" --version 2>&1 | awk 'NR == 1 { print $3 }'), kube-state-metrics $("$KSM_BIN/kube-state-metrics" version 2>&1 | grep -o 'v[0-9][^ ,]*' | head -1); median of $SAMPLES readings ${SAMPLE_SECONDS}s apart after ${SETTLE_SECONDS}s; cgroup = the container's own cgroup (CPU over rate5m's window, memory at the last reading)."
echo
header="| rule | pod/container |"
sep="|---|---|"
for a in "${agents[@]}"; do header+=" $a | $a cgroup | rule/cgroup |"; sep+="---|---|---|"; done
((${#agents[@]} < 2)) || { header+=" ${agents[0]}/${agents[1]} |"; sep+="---|"; }
echo "$header"
echo "$sep"
keys="$(cat "$OUT"/*/medians | awk '{ print $1, $2 }' | sort -u)"
while read -r rule key; do
	[[ -n "$rule" ]] || continue
	row="| ${rule#node_namespace_pod_container:} | $key |"
	vals=()
	for a in "${agents[@]}"; do
		v="$(lookup "$OUT/$a/medians" "$rule" "$key")"
		vals+=("$v")
		t="$(lookup "$OUT/$a/truth" "$(truth_key "$rule")" "${key#"$PREFIX"}")"
		row+=" $(fmt "$rule" "$v") | $(fmt "$rule" "$t") | $(ratio "$v" "$t") |"
	done
	if ((${#agents[@]} >= 2)); then
		row+=" $(ratio "${vals[0]}" "${vals[1]}") |"
	fi
	echo "$row"
done <<<"$keys"

echo
echo "promtool check metrics, findings per endpoint (${agents[*]}):"
for ep in metrics metrics-cadvisor metrics-probes metrics-resource; do
	echo
	echo "/${ep//-//}:"
	for a in "${agents[@]}"; do
		echo "  $a: $(grep -vc '^$' "$OUT/$a/promtool-$ep" || true) lines"
		sed 's/^/    /' "$OUT/$a/promtool-$ep"
	done
done
