#!/usr/bin/env bash
# Cluster-mode benchmark of one agent, kubelet-rs or the upstream kubelet, joined as its own node
# to a control plane of its own (hack/cluster/up.sh --audit), on the same containerd. Run it once
# per agent, one at a time (both use the machine's pod network and image store), and compare the
# tables. Needs root, containerd, the test images (hack/build-images.sh) and the Kubernetes
# binaries (hack/cluster/build.sh).
#
#   hack/bench/cluster.sh --agent kubelet-rs|upstream [--dir DIR] [--port-offset N] [--volumes]
#                         [--claims] [--streaming] [--top]
#
# --volumes: every pod also mounts what real pods mount: the apiserver's default
# kube-api-access-* volume (a service-account token from the TokenRequest API, the cluster CA
# from the kube-root-ca.crt ConfigMap, the namespace) and one configMap and one secret volume
# (automountServiceAccountToken left on; the ConfigMap and Secret are made once, up front).
#
# --claims: every pod also mounts a persistentVolumeClaim of its own, bound (before the round's
# t0, so the PV controller's binding is not in the figures) to a `local` PV of the node (a folder
# under DIR/claims, node affinity on the node's hostname): what the agent does for a stateful
# pod (read the claim and the PV, check the affinity, bind-mount the volume) is in (a). The
# claims and PVs of a round go with its pods.
#
# --streaming: instead of (a), (c) and (d), the streaming endpoints through the apiserver, with
# kubectl's default transport: the latency of `kubectl exec <pod> -- true` (EXEC_RUNS calls, one
# at a time, after 3 unmeasured ones; p50 and p99, nearest rank), and `kubectl cp` of a 20 MiB
# file of random bytes into the pod and back (CP_RUNS each way; median MiB/s, and the copy's
# md5 checked). kubectl's own start-up is in every figure, for both agents alike.
#
# --top: instead of (a), (c) and (d), what `kubectl top pod` shows through metrics-server
# (hack/cluster/metrics-server.sh, deployed on the node): a pod spinning one CPU and a pod
# holding a 200 MiB file in a memory-backed emptyDir; TOP_SAMPLES (8) readings 15 s apart (the
# metrics-server's resolution) once both pods are listed, median CPU and memory of each, and
# `kubectl top node` at the end.
#
# What it measures (wall clock from bash's $EPOCHREALTIME, no process forked for a stamp):
#  (b) agent start → Node Ready: from just before the agent process is started to the moment a
#      `kubectl get nodes -w` started beforehand delivers the Node with condition Ready=True.
#      Fresh control plane, so this includes registering the Node.
#  (a) pod created → Running: a `kubectl get pods -w` runs for the whole benchmark and every
#      event is stamped as it arrives. A round records t0, then `kubectl create -f` of a List
#      of N pods (busybox `sleep 3600`, automountServiceAccountToken false, nodeSelector on the
#      node's kubernetes.io/hostname, so through the scheduler; dnsPolicy Default, as this
#      cluster has no DNS); a pod's latency is its first
#      event with phase Running minus t0. N=1 is run ONE_RUNS times, N=BATCH (30) BATCH_RUNS
#      times; p50 and p99 are nearest-rank percentiles over all pods of all rounds of that size,
#      "all Running" is the median over rounds of the last pod's latency. For N=30, t0 is before
#      the first of kubectl's 30 sequential POSTs. Pods of a round are deleted (and gone from the
#      API) before the next round, except the last round's.
#  (c) API requests per minute when idle: with the last BATCH pods Running, after SETTLE_SECONDS,
#      the apiserver's audit events of stage RequestReceived from user system:node:<node> over
#      IDLE_SECONDS, times 60/IDLE_SECONDS (a watch counts once, when it is opened); the table
#      also breaks them down by verb and resource.
#  (d) agent RSS with 30 pods: VmRSS of the agent process at the end of that idle window, and its
#      peak (VmHWM) since it started; plus its CPU seconds over the window. The containerd side
#      (containerd itself, the shims; kubelet-rs's log writers) is listed apart: not the agent.
#
# Knobs (environment): ONE_RUNS (10), BATCH (30), BATCH_RUNS (3), SETTLE_SECONDS (30),
# IDLE_SECONDS (300: the upstream kubelet reports an unchanged node status every 5 minutes, so a
# shorter window would catch that report or not by chance). KEEP_CLUSTER=1 leaves the control
# plane up (pods and agent are removed). NO_BUILD=1 skips `cargo build --release`.
# The agent: upstream = $(hack/cluster/build.sh --print)/kubelet through the CRI plugin
# (hack/bench/upstream-kubelet.sh), node bench-upstream; kubelet-rs = target/release/kubelet-rs
# (built here) in containerd namespace krs-bench-cluster, node bench-rs. Its state and log are in
# DIR/upstream/<node> or DIR/kubelet-rs/<node>; the pod and node watch stamps in DIR/bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

AGENT=""
DIR=/var/lib/kubelet-rs-bench-cluster
OFFSET=300
VOLUMES=0
CLAIMS=0
STREAMING=0
TOP=0
while (($# > 0)); do
	case "$1" in
	--agent) AGENT="$2"; shift ;;
	--dir) DIR="$2"; shift ;;
	--port-offset) OFFSET="$2"; shift ;;
	--volumes) VOLUMES=1 ;;
	--claims) CLAIMS=1 ;;
	--streaming) STREAMING=1 ;;
	--top) TOP=1 ;;
	-h | --help) sed -n '2,63s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
case "$AGENT" in
upstream) NODE=bench-upstream ;;
kubelet-rs) NODE=bench-rs ;;
*) die "--agent kubelet-rs|upstream is required" ;;
esac

ONE_RUNS="${ONE_RUNS:-10}"
BATCH="${BATCH:-30}"
BATCH_RUNS="${BATCH_RUNS:-3}"
SETTLE_SECONDS="${SETTLE_SECONDS:-30}"
IDLE_SECONDS="${IDLE_SECONDS:-300}"
RS_NS=krs-bench-cluster
PORT=$((10250 + OFFSET))
POD_PREFIX=krs-bench-
require_root
require_cmd ctr curl awk
require_containerd

# shellcheck source=hack/bench/cluster-agent.sh
source hack/bench/cluster-agent.sh
prepare_agent $( ((TOP)) && echo metrics-server)

cleanup() {
	local rc=$?
	set +e
	trap - EXIT
	log "cleaning up"
	if ((rc != 0)) && [[ -f "$DIR/admin.kubeconfig" ]]; then
		echo "node $NODE taints: $(kc get node "$NODE" -o jsonpath='{.spec.taints}' 2>&1)" >&2
		echo "node $NODE conditions: $(kc get node "$NODE" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {end}' 2>&1)" >&2
		kc get pods -l app=krs-bench -o wide 2>&1 | grep -v ' Running ' | head -5 >&2
	fi
	if ((TOP)) && [[ -f "$DIR/admin.kubeconfig" ]]; then
		hack/cluster/metrics-server.sh --dir "$DIR" --node "$NODE" --delete >/dev/null 2>&1
	fi
	if agent_alive; then
		# Through the agent, so it stops and removes the pods' containers itself.
		kc delete pods -l app=krs-bench --wait=true --timeout=180s >/dev/null 2>&1
		wait_runtime_empty 120
	fi
	stop_agent_clean
	local p
	for p in "${WATCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
	if [[ -z "${KEEP_CLUSTER:-}" ]]; then
		hack/cluster/down.sh --dir "$DIR" >/dev/null
	fi
	exit "$rc"
}




node_ready_seen() { awk '$4 == "True" { f = 1 } END { exit !f }' "$BENCH/node.events"; }
node_untainted() { [[ -z "$(kc get node "$NODE" -o jsonpath='{.spec.taints}')" ]]; }

# The microsecond stamp of each pod's first Running event, for pods named PREFIX*: "name stamp".
running_stamps() {
	awk -v p="$1" '$3 ~ "^" p && $4 == "Running" && !($3 in seen) { seen[$3] = $1; print $3, $1 }' "$BENCH/pods.events"
}
all_running() { [[ "$(running_stamps "$1" | wc -l)" -ge "$2" ]]; }
none_left() { [[ -z "$(kc get pods -l "round=$1" -o name)" ]]; }

write_round() {
	local round="$1" n="$2" i automount=false volumes="" mounts=""
	if ((VOLUMES)); then
		automount=true
		volumes="
    volumes:
    - {name: cfg, configMap: {name: krs-bench-cfg}}
    - {name: sec, secret: {secretName: krs-bench-sec}}"
		mounts="
      volumeMounts:
      - {name: cfg, mountPath: /etc/cfg}
      - {name: sec, mountPath: /etc/sec}"
	fi
	if ((CLAIMS)); then
		volumes="${volumes:-
    volumes:}
    - {name: data, persistentVolumeClaim: {claimName: CLAIM}}"
		mounts="${mounts:-
      volumeMounts:}
      - {name: data, mountPath: /data}"
	fi
	{
		echo "apiVersion: v1"
		echo "kind: List"
		echo "items:"
		for ((i = 0; i < n; i++)); do
			cat <<YAML
- apiVersion: v1
  kind: Pod
  metadata:
    name: $POD_PREFIX$round-$i
    labels: {app: krs-bench, round: "$round"}
  spec:
    automountServiceAccountToken: $automount
    dnsPolicy: Default
    terminationGracePeriodSeconds: 1
    nodeSelector: {kubernetes.io/hostname: $NODE}
    containers:
    - name: c
      image: docker.io/library/busybox:1.36
      imagePullPolicy: IfNotPresent
      command: ["sleep", "3600"]$mounts${volumes//CLAIM/$POD_PREFIX$round-$i}
YAML
		done
	} >"$BENCH/$round.yaml"
}

# --claims: a local PV and its claim, bound to each other, for every pod of the round.
write_claims() {
	local round="$1" n="$2" i name
	{
		echo "apiVersion: v1"
		echo "kind: List"
		echo "items:"
		for ((i = 0; i < n; i++)); do
			name="$POD_PREFIX$round-$i"
			mkdir -p "$DIR/claims/$name"
			cat <<YAML
- apiVersion: v1
  kind: PersistentVolume
  metadata: {name: $name, labels: {app: krs-bench, round: "$round"}}
  spec:
    capacity: {storage: 1Gi}
    accessModes: [ReadWriteOnce]
    persistentVolumeReclaimPolicy: Retain
    storageClassName: krs-bench-local
    claimRef: {namespace: default, name: $name}
    local: {path: $DIR/claims/$name}
    nodeAffinity:
      required:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE]}]
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata: {name: $name, namespace: default, labels: {app: krs-bench, round: "$round"}}
  spec:
    storageClassName: krs-bench-local
    volumeName: $name
    accessModes: [ReadWriteOnce]
    resources: {requests: {storage: 1Gi}}
YAML
		done
	} >"$BENCH/$round-claims.yaml"
	kc create -f "$BENCH/$round-claims.yaml" >/dev/null
	wait_until 120 "the claims of round $round Bound" claims_bound "$round" "$n"
}
claims_bound() { [[ "$(kc get pvc -l "round=$1" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Bound$')" -ge "$2" ]]; }

# One round: N pods created at once; appends each pod's latency (ms) to $BENCH/latency-N and
# the round's last one to $BENCH/all-N.
run_round() {
	local round="$1" n="$2" keep="${3:-}" t0
	write_round "$round" "$n"
	((CLAIMS == 0)) || write_claims "$round" "$n"
	t0="$(now_us)"
	kc create -f "$BENCH/$round.yaml" >/dev/null
	awk -v a="$t0" -v b="$(now_us)" 'BEGIN { printf "%.0f\n", (b - a) / 1000 }' >>"$BENCH/created-$n"
	wait_until 300 "$n pods of round $round Running" all_running "$POD_PREFIX$round-" "$n"
	running_stamps "$POD_PREFIX$round-" | awk -v t0="$t0" '{ printf "%.1f\n", ($2 - t0) / 1000 }' >"$BENCH/$round.ms"
	cat "$BENCH/$round.ms" >>"$BENCH/latency-$n"
	sort -n "$BENCH/$round.ms" | tail -1 >>"$BENCH/all-$n"
	log "round $round: $n pods Running, last after $(tail -1 "$BENCH/all-$n") ms"
	if [[ -z "$keep" ]]; then
		kc delete pods -l "round=$round" --wait=true --timeout=180s >/dev/null
		wait_until 180 "the pods of round $round to be gone" none_left "$round"
		if ((CLAIMS)); then
			kc delete pvc,pv -l "round=$round" --wait=true --timeout=120s >/dev/null
		fi
	fi
}

# Nearest-rank percentile P of the numbers on stdin.
percentile() { sort -n | awk -v p="$1" '{ a[NR] = $1 } END { r = int((p * NR + 99) / 100); if (r < 1) r = 1; print a[r] }'; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# "count KiB" of processes whose command line matches the regular expression.
procs_rss() { ps -eo rss=,args= | awk -v re="$1" '$0 ~ re && !/awk/ { s += $1; n++ } END { printf "%d %d", n, s }'; }

trap cleanup EXIT
hack/cluster/up.sh --dir "$DIR" --port-offset "$OFFSET" --audit
BENCH="$DIR/bench"
rm -rf "$BENCH"
mkdir -p "$BENCH"
AUDIT_LOG="$DIR/logs/audit.log"

# (b) agent start → Node Ready.
watch_stamped "$BENCH/node.events" nodes --field-selector "metadata.name=$NODE" \
	-o jsonpath='{.type} {.object.metadata.name} {.object.status.conditions[?(@.type=="Ready")].status}{"\n"}'
sleep 2
start_agent
wait_until 180 "node $NODE Ready" node_ready_seen
READY_US="$(awk '$4 == "True" { print $1; exit }' "$BENCH/node.events")"
READY_MS="$(awk -v a="$START_US" -v b="$READY_US" 'BEGIN { printf "%.0f", (b - a) / 1000 }')"
log "agent pid $AGENT_PID; node $NODE Ready $READY_MS ms after the agent started"
wait_until 120 "the node's taints to be lifted" node_untainted
if ((VOLUMES)); then
	kc create configmap krs-bench-cfg --from-literal=app.conf=threads=4 >/dev/null
	kc create secret generic krs-bench-sec --from-literal=password=hunter2 >/dev/null
fi
if ((CLAIMS)); then
	kc apply -f - >/dev/null <<'YAML'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: krs-bench-local}
provisioner: kubernetes.io/no-provisioner
YAML
fi
sleep 5

# --streaming: exec latency and cp throughput, then done.
stream_bench() {
	local pod="${POD_PREFIX}stream-0" i t0 t1 sum
	local runs="${EXEC_RUNS:-100}" cps="${CP_RUNS:-5}"
	write_round stream 1
	kc create -f "$BENCH/stream.yaml" >/dev/null
	kc wait --for=condition=Ready "pod/$pod" --timeout=180s >/dev/null
	for ((i = 0; i < 3; i++)); do kc exec "$pod" -- true; done
	: >"$BENCH/exec-ms"
	for ((i = 0; i < runs; i++)); do
		t0="$(now_us)"
		kc exec "$pod" -- true
		t1="$(now_us)"
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) / 1000 }' >>"$BENCH/exec-ms"
	done
	head -c $((20 << 20)) /dev/urandom >"$BENCH/blob"
	sum="$(md5sum <"$BENCH/blob" | cut -d' ' -f1)"
	: >"$BENCH/cp-in"
	: >"$BENCH/cp-out"
	for ((i = 0; i < cps; i++)); do
		t0="$(now_us)"
		kc cp "$BENCH/blob" "default/$pod:/tmp/blob"
		t1="$(now_us)"
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", 20 / ((b - a) / 1e6) }' >>"$BENCH/cp-in"
		rm -f "$BENCH/back"
		t0="$(now_us)"
		kc cp "default/$pod:/tmp/blob" "$BENCH/back" 2>/dev/null
		t1="$(now_us)"
		[[ "$(md5sum <"$BENCH/back" | cut -d' ' -f1)" == "$sum" ]] || die "kubectl cp from the pod: the copy differs"
		awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", 20 / ((b - a) / 1e6) }' >>"$BENCH/cp-out"
	done
	[[ "$(kc exec "$pod" -- md5sum /tmp/blob | cut -d' ' -f1)" == "$sum" ]] || die "kubectl cp to the pod: the copy differs"
	echo
	echo "### $AGENT streaming (node $NODE, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
	echo
	echo "| measure | value |"
	echo "|---|---|"
	echo "| \`kubectl exec pod -- true\`: p50 / p99 over $runs calls | $(percentile 50 <"$BENCH/exec-ms") / $(percentile 99 <"$BENCH/exec-ms") ms |"
	echo "| \`kubectl cp\` 20 MiB into the pod: median of $cps | $(median <"$BENCH/cp-in") MiB/s |"
	echo "| \`kubectl cp\` 20 MiB out of the pod: median of $cps | $(median <"$BENCH/cp-out") MiB/s |"
	echo "| agent CPU seconds since start | $(cpu_seconds "$AGENT_PID") s |"
	echo "| agent peak RSS since start (VmHWM) | $(mib "$(status_kb "$AGENT_PID" VmHWM)") MiB |"
}
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
if ((STREAMING)); then
	stream_bench
	exit 0
fi

# --top: kubectl top's figures for a spinning pod and a 200 MiB pod, then done.
top_pods_listed() {
	local listed
	listed="$(kc top pod --no-headers 2>/dev/null)" || return 1
	grep -q "^${POD_PREFIX}spin " <<<"$listed" && grep -q "^${POD_PREFIX}mem " <<<"$listed"
}
top_bench() {
	local samples="${TOP_SAMPLES:-8}" i
	hack/cluster/metrics-server.sh --dir "$DIR" --node "$NODE"
	kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: ${POD_PREFIX}spin, labels: {app: krs-bench}}
  spec:
    automountServiceAccountToken: false
    terminationGracePeriodSeconds: 1
    nodeSelector: {kubernetes.io/hostname: $NODE}
    containers:
    - {name: c, image: docker.io/library/busybox:1.36, command: ["sh", "-c", "while :; do :; done"]}
- apiVersion: v1
  kind: Pod
  metadata: {name: ${POD_PREFIX}mem, labels: {app: krs-bench}}
  spec:
    automountServiceAccountToken: false
    terminationGracePeriodSeconds: 1
    nodeSelector: {kubernetes.io/hostname: $NODE}
    volumes: [{name: m, emptyDir: {medium: Memory}}]
    containers:
    - name: c
      image: docker.io/library/busybox:1.36
      command: ["sh", "-c", "head -c 209715200 /dev/zero > /m/fill && sleep 3600"]
      volumeMounts: [{name: m, mountPath: /m}]
YAML
	kc wait --for=condition=Ready "pod/${POD_PREFIX}spin" "pod/${POD_PREFIX}mem" --timeout=180s >/dev/null
	wait_until 300 "kubectl top pod to list both pods" top_pods_listed
	: >"$BENCH/top"
	for ((i = 0; i < samples; i++)); do
		sleep 15
		# "name cpu(m) memory(Mi)"
		kc top pod --no-headers | awk -v p="$POD_PREFIX" '$1 ~ "^" p { sub(/m$/, "", $2); sub(/Mi$/, "", $3); print $1, $2, $3 }' >>"$BENCH/top"
	done
	local node_top
	node_top="$(kc top node "$NODE" --no-headers)"
	echo
	echo "### $AGENT: kubectl top through metrics-server (node $NODE, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
	echo
	echo "| pod | CPU, median of $samples readings 15 s apart | memory, median |"
	echo "|---|---|---|"
	local pod
	for pod in spin mem; do
		echo "| $pod | $(awk -v n="$POD_PREFIX$pod" '$1 == n { print $2 }' "$BENCH/top" | median)m | $(awk -v n="$POD_PREFIX$pod" '$1 == n { print $3 }' "$BENCH/top" | median)Mi |"
	done
	echo
	echo "kubectl top node: \`$node_top\`"
}
if ((TOP)); then
	top_bench
	exit 0
fi

# (a) pod created → Running.
watch_stamped "$BENCH/pods.events" pods -l app=krs-bench \
	-o jsonpath='{.type} {.object.metadata.name} {.object.status.phase}{"\n"}'
sleep 2
for ((r = 0; r < ONE_RUNS; r++)); do run_round "one$r" 1; done
for ((r = 0; r < BATCH_RUNS; r++)); do
	keep=""
	((r == BATCH_RUNS - 1)) && keep=keep
	run_round "batch$r" "$BATCH" "$keep"
done

# (c) and (d): idle with the last BATCH pods Running.
log "idle: ${SETTLE_SECONDS}s to settle, then ${IDLE_SECONDS}s measured"
sleep "$SETTLE_SECONDS"
[[ "$(running_stamps "${POD_PREFIX}batch$((BATCH_RUNS - 1))-" | wc -l)" -ge "$BATCH" ]] || die "pods are not all Running"
a0="$(stat -c %s "$AUDIT_LOG")"
c0="$(cpu_seconds "$AGENT_PID")"
sleep "$IDLE_SECONDS"
a1="$(stat -c %s "$AUDIT_LOG")"
c1="$(cpu_seconds "$AGENT_PID")"
RSS_KB="$(status_kb "$AGENT_PID" VmRSS)"
HWM_KB="$(status_kb "$AGENT_PID" VmHWM)"
RUNNING_NOW="$(kc get pods -l app=krs-bench --field-selector status.phase=Running -o name | wc -l)"
if [[ "$AGENT" == upstream ]]; then
	read -r SHIMS SHIMS_KB <<<"$(procs_rss 'containerd-shim.* -namespace k8s.io ')"
	read -r LOGGERS LOGGERS_KB <<<"0 0"
else
	read -r SHIMS SHIMS_KB <<<"$(procs_rss "containerd-shim.* -namespace $RS_NS ")"
	read -r LOGGERS LOGGERS_KB <<<"$(procs_rss 'kubelet-rs-cri-logger')"
fi
CONTAINERD_KB="$(status_kb "$(pgrep -xo containerd)" VmRSS)"
tail -c +$((a0 + 1)) "$AUDIT_LOG" | head -c $((a1 - a0)) |
	grep -F '"stage":"RequestReceived"' | grep -F "\"username\":\"system:node:$NODE\"" >"$BENCH/idle-requests.json" || true
REQUESTS="$(wc -l <"$BENCH/idle-requests.json")"
# verb resource[/subresource] for each request.
awk '{
	verb = ""; res = ""; sub_ = ""
	if (match($0, /"verb":"[^"]*"/)) verb = substr($0, RSTART + 8, RLENGTH - 9)
	if (match($0, /"objectRef":\{[^}]*\}/)) {
		o = substr($0, RSTART, RLENGTH)
		if (match(o, /"resource":"[^"]*"/)) res = substr(o, RSTART + 12, RLENGTH - 13)
		if (match(o, /"subresource":"[^"]*"/)) sub_ = "/" substr(o, RSTART + 15, RLENGTH - 16)
	} else if (match($0, /"requestURI":"[^"?]*/)) res = substr($0, RSTART + 14, RLENGTH - 14)
	print verb, res sub_
}' "$BENCH/idle-requests.json" | sort | uniq -c | sort -rn >"$BENCH/idle-requests.txt"

per_min() { awk -v n="$1" -v s="$IDLE_SECONDS" 'BEGIN { printf "%.1f", n * 60 / s }'; }
echo
echo "### $AGENT (node $NODE,$( ((VOLUMES)) && echo " pods with token, configMap and secret volumes,")$( ((CLAIMS)) && echo " pods with a local PV claim each,") $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| measure | value |"
echo "|---|---|"
echo "| (b) agent start → Node Ready | $READY_MS ms |"
for n in 1 "$BATCH"; do
	runs=$ONE_RUNS
	[[ "$n" == "$BATCH" ]] && runs=$BATCH_RUNS
	what="$n pods at once"
	[[ "$n" == 1 ]] && what="1 pod"
	echo "| (a) $what, created → Running: p50 / p99 over $(wc -l <"$BENCH/latency-$n") pods in $runs rounds | $(percentile 50 <"$BENCH/latency-$n") / $(percentile 99 <"$BENCH/latency-$n") ms |"
	[[ "$n" == 1 ]] || echo "| (a) $what, the last one Running: median of rounds ($(paste -sd' ' "$BENCH/all-$n")) | $(median <"$BENCH/all-$n") ms |"
	[[ "$n" == 1 ]] || echo "| (a) $what, \`kubectl create\` returned (in the latencies above): median of rounds | $(median <"$BENCH/created-$n") ms |"
done
echo "| (c) API requests by system:node:$NODE, idle with $RUNNING_NOW pods Running ($REQUESTS in ${IDLE_SECONDS}s) | $(per_min "$REQUESTS") /min |"
echo "| (d) agent RSS with $RUNNING_NOW pods (VmRSS at the end of the idle window) | $(mib "$RSS_KB") MiB |"
echo "| (d) agent peak RSS since start (VmHWM) | $(mib "$HWM_KB") MiB |"
echo "| agent CPU over the ${IDLE_SECONDS}s idle window | $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') s |"
echo "| not the agent: containerd-shim processes of these pods | $SHIMS, $(mib "$SHIMS_KB") MiB RSS in all |"
[[ "$AGENT" == upstream ]] || echo "| not the agent: log writer processes | $LOGGERS, $(mib "$LOGGERS_KB") MiB RSS in all |"
echo "| not the agent: containerd (shared, whole daemon) | $(mib "$CONTAINERD_KB") MiB RSS |"
echo
echo "Idle requests by verb and resource (count in ${IDLE_SECONDS}s):"
echo
echo '```'
cat "$BENCH/idle-requests.txt"
echo '```'
echo
echo "Events about the benchmark's pods and the node (reason, count summed):"
echo
echo '```'
kc get events -o jsonpath='{range .items[*]}{.reason} {.count}{"\n"}{end}' |
	awk '{ c[$1] += ($2 == "" ? 1 : $2) } END { for (r in c) print c[r], r }' | sort -rn
echo '```'
