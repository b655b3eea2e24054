#!/usr/bin/env bash
# The persistent-volume cases of the cluster tests (integration/cluster_persistent.rs,
# cluster_csi.rs, cluster_csi_provisioning.rs), run the same way against one agent, kubelet-rs
# or the upstream kubelet, joined as its own node to a control plane of its own, on the same
# containerd: each case's result and its pod's created → Running time. Run it once per agent,
# one at a time, and compare the tables. Needs root, containerd, the test images
# (hack/build-images.sh), the Kubernetes binaries (hack/cluster/build.sh) and hack/csi's
# (hack/csi/build.sh: its driver, registrar and provisioner, and upstream's external-attacher).
#
#   hack/bench/storage.sh --agent kubelet-rs|upstream [--dir DIR] [--port-offset N]
#
# The cases, in order, on one node (the CSI driver's registrar registers through the agent's
# plugins_registry, as node-driver-registrar does):
#  local  a pod's claim bound through a WaitForFirstConsumer StorageClass to a `local` PV (a
#         folder under DIR/storage with node affinity on the node): Running, its write in the
#         folder on the host.
#  sts    a StatefulSet's volumeClaimTemplate through a WaitForFirstConsumer StorageClass of the
#         CSI driver: provisioned for the node, attached by the external-attacher, staged and
#         published; the pod Running and its write in the driver's volume. Its time includes
#         the scheduling, provisioning and attaching.
#  again  that pod deleted: the StatefulSet's next pod Running on the same volume, reading the
#         first pod's write.
#  kill9  the agent killed with SIGKILL with both pods' volumes mounted, then started again: 10 s
#         later the pods run the same containers and the mounts under the agent's root dir are
#         as before; how many NodePublishVolume calls the restart made is shown.
#  fail   a pod with an inline CSI volume while the driver fails NodePublishVolume: a FailedMount
#         event in upstream's words and no mount folder; once the driver stops failing, Running
#         (the time is from then).
#  clean  every pod and claim deleted: nothing mounted under the agent's root dir, the driver's
#         volumes unpublished and unstaged (the time is from the deletions).
# Times are wall clock from bash's $EPOCHREALTIME to the pod's first Running event on a
# `kubectl get pods -w` started beforehand. A case that fails says why and the next runs.
# The agent's state and log are in DIR/kubelet-rs/<node> or DIR/upstream/<node>; the CSI
# processes' logs and the driver's requests in DIR/storage/csi. Keep DIR short: the
# registrar's socket in the agent's plugins_registry must fit a unix socket path (107 bytes).
# KEEP_CLUSTER=1 leaves the
# control plane up; NO_BUILD=1 skips `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

AGENT=""
DIR=/var/lib/krs-storage
OFFSET=700
while (($# > 0)); do
	case "$1" in
	--agent) AGENT="$2"; shift ;;
	--dir) DIR="$2"; shift ;;
	--port-offset) OFFSET="$2"; shift ;;
	-h | --help) sed -n '2,37s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
case "$AGENT" in
upstream) NODE=st-up ;;
kubelet-rs) NODE=st-rs ;;
*) die "--agent kubelet-rs|upstream is required" ;;
esac
RS_NS=krs-bench-storage
PORT=$((10250 + OFFSET))
POD_PREFIX=krs-storage-
require_root
require_cmd ctr curl awk losetup
require_containerd

# shellcheck source=hack/bench/cluster-agent.sh
source hack/bench/cluster-agent.sh
prepare_agent
mapfile -t CSI_BINS < <(hack/csi/build.sh --print)
OURS="${CSI_BINS[0]:-}"
ATTACHER="${CSI_BINS[1]:-}/csi-attacher"
for b in "$OURS/krs-csi-driver" "$OURS/krs-csi-registrar" "$OURS/krs-csi-provisioner" "$ATTACHER"; do
	[[ -x "$b" ]] || die "no $b; run hack/csi/build.sh"
done
if [[ "$AGENT" == upstream ]]; then
	ROOT="$DIR/upstream/$NODE/root"
else
	ROOT="$DIR/kubelet-rs/$NODE/root"
fi
STORAGE="$DIR/storage"
CSI="$STORAGE/csi"
DRIVER="st.csi.krs.io"
BENCH="$DIR/bench"
CSI_PIDS=()
RESULTS=()

cleanup() {
	local rc=$?
	set +e
	trap - EXIT
	log "cleaning up"
	if agent_alive; then
		kc delete statefulset "${POD_PREFIX}db" --wait=false >/dev/null 2>&1
		kc delete pods -l app=krs-storage --wait=true --timeout=120s >/dev/null 2>&1
		kc delete pvc --all --wait=false >/dev/null 2>&1
		await 120 no_mounts_under_root || warn "mounts left under $ROOT: $(mounts_under_root)"
		# The upstream kubelet removes a deleted pod's sandbox at its next container GC.
		wait_runtime_empty 120
	fi
	local p
	for p in "${CSI_PIDS[@]}"; do stop_pid "$p" "a CSI process" >/dev/null; done
	stop_agent_clean
	for p in "${WATCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
	if [[ -z "${KEEP_CLUSTER:-}" ]]; then
		hack/cluster/down.sh --dir "$DIR" >/dev/null
	fi
	exit "$rc"
}

# await SECONDS COMMAND...: polls COMMAND every 0.2 s; 1 when it never held.
await() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# The mount points at or below the agent's root dir, one per line.
mounts_under_root() { awk -v r="$ROOT/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort; }
no_mounts_under_root() { [[ -z "$(mounts_under_root)" ]]; }

# running_after NAME T0 [UID]: the stamp (µs) of the first Running event of a pod NAME after
# the stamp T0, if any; with UID, of a pod NAME other than that one (a pod being deleted is
# still Running in its last events).
running_after() {
	awk -v n="$1" -v t="$2" -v old="${3:-}" \
		'$3 == n && $4 == "Running" && $1 > t && $5 != old { print $1; exit }' "$BENCH/pods.events"
}
is_running_after() { [[ -n "$(running_after "$@")" ]]; }
ms_since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) / 1000 }'; }

# The requests of one CSI method the driver logged.
csi_count() { grep -c "\"method\":\"[^\"]*/$1\"" "$CSI/requests.jsonl" 2>/dev/null || true; }

node_ready() {
	[[ "$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

pod_field() { kc get pod "$1" -o jsonpath="$2" 2>/dev/null; }
pod_uid() { pod_field "$1" '{.metadata.uid}'; }
container_id() { pod_field "$1" '{.status.containerStatuses[0].containerID}'; }
pod_log() { kc logs "$1" 2>/dev/null; }
log_has() { pod_log "$1" | grep -q "$2"; }
# The messages of POD's events of REASON.
event_messages() {
	kc get events --field-selector "involvedObject.name=$1,reason=$2" \
		-o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null
}
event_has() { event_messages "$1" "$2" | grep -qF "$3"; }

# result CASE CHECKED RESULT TIME
result() { RESULTS+=("| $1 | $2 | $3 | $4 |"); log "$1: $3${4:+ ($4)}"; }

pod_yaml() {
	local name="$1" script="$2" volumes="$3"
	cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {app: krs-storage}}
spec:
  automountServiceAccountToken: false
  dnsPolicy: Default
  terminationGracePeriodSeconds: 1
  nodeSelector: {kubernetes.io/hostname: $NODE}
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [sh, -c, '$script']
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
$volumes
YAML
}

trap cleanup EXIT
hack/cluster/up.sh --dir "$DIR" --port-offset "$OFFSET"
rm -rf "$BENCH" "$STORAGE"
mkdir -p "$BENCH" "$CSI" "$STORAGE/local"
start_agent
wait_until 180 "node $NODE Ready" node_ready
log "agent pid $AGENT_PID, node $NODE Ready"
watch_stamped "$BENCH/pods.events" pods -l app=krs-storage \
	-o jsonpath='{.type} {.object.metadata.name} {.object.status.phase} {.object.metadata.uid}{"\n"}'

# The CSI driver, its registrar into the agent's plugins_registry, the attacher, the provisioner.
csi_start() {
	local name="$1" bin="$2"
	shift 2
	"$bin" "$@" >"$CSI/$name.log" 2>&1 </dev/null &
	CSI_PIDS+=($!)
}
csi_start driver "$OURS/krs-csi-driver" --endpoint="$CSI/csi.sock" --driver-name="$DRIVER" \
	--node-id="$NODE" --data-dir="$CSI/data" --attach-required=true \
	--fail-publish-file="$CSI/fail-publish" --requests-log="$CSI/requests.jsonl"
wait_until 30 "the driver's socket" test -S "$CSI/csi.sock"
wait_until 60 "the agent's plugins_registry" test -d "$ROOT/plugins_registry"
csi_start registrar "$OURS/krs-csi-registrar" --csi-address="$CSI/csi.sock" \
	--plugin-registration-dir="$ROOT/plugins_registry"
csi_start attacher "$ATTACHER" --csi-address="$CSI/csi.sock" \
	--kubeconfig="$DIR/admin.kubeconfig" --leader-election=false --timeout=30s
csi_start provisioner "$OURS/krs-csi-provisioner" --csi-address="$CSI/csi.sock" \
	--kubeconfig="$DIR/admin.kubeconfig" --timeout=30s --extra-create-metadata \
	--retry-interval-max=5s
csinode_lists_driver() {
	kc get csinode "$NODE" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null | grep -qw "$DRIVER"
}
wait_until 60 "the CSINode to list $DRIVER" csinode_lists_driver

kc apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: $DRIVER}
spec:
  attachRequired: true
  podInfoOnMount: true
  volumeLifecycleModes: [Persistent, Ephemeral]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: krs-storage-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: krs-storage-csi}
provisioner: $DRIVER
volumeBindingMode: WaitForFirstConsumer
YAML

# local
case_local() {
	local pod="${POD_PREFIX}local" t0
	kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: ${POD_PREFIX}local-pv}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: krs-storage-local
  local: {path: $STORAGE/local}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ${POD_PREFIX}local-claim}
spec:
  storageClassName: krs-storage-local
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
YAML
	t0="$(now_us)"
	pod_yaml "$pod" 'echo local-ok > /data/f; sleep 3600' \
		"    persistentVolumeClaim: {claimName: ${POD_PREFIX}local-claim}" | kc create -f - >/dev/null
	if ! await 120 is_running_after "$pod" "$t0"; then
		result local "Running, the write on the host" "FAILED: not Running in 120 s" ""
		return
	fi
	local ms
	ms="$(ms_since "$t0" "$(running_after "$pod" "$t0")")"
	if await 30 grep -q local-ok "$STORAGE/local/f"; then
		result local "Running, the write on the host" ok "$ms ms"
	else
		result local "Running, the write on the host" "FAILED: no write in $STORAGE/local" "$ms ms"
	fi
}

# sts, again
STS="${POD_PREFIX}db"
STS_POD="${STS}-0"
case_sts() {
	local t0 ms
	t0="$(now_us)"
	kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: $STS}
spec:
  replicas: 1
  serviceName: $STS
  selector: {matchLabels: {app: krs-storage}}
  template:
    metadata: {labels: {app: krs-storage}}
    spec:
      automountServiceAccountToken: false
      dnsPolicy: Default
      terminationGracePeriodSeconds: 1
      nodeSelector: {kubernetes.io/hostname: $NODE}
      containers:
      - name: c
        image: docker.io/library/busybox:1.36
        imagePullPolicy: IfNotPresent
        command: [sh, -c, 'if [ -f /data/f ]; then echo found-\$(cat /data/f); else echo first > /data/f; fi; sleep 3600']
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      storageClassName: krs-storage-csi
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
YAML
	if ! await 180 is_running_after "$STS_POD" "$t0"; then
		result sts "provisioned, attached, Running, the write in the driver's volume" "FAILED: not Running in 180 s" ""
		return 1
	fi
	ms="$(ms_since "$t0" "$(running_after "$STS_POD" "$t0")")"
	if await 30 sh -c "cat '$CSI'/data/volumes/*/f 2>/dev/null | grep -q first"; then
		result sts "provisioned, attached, Running, the write in the driver's volume" ok "$ms ms"
	else
		result sts "provisioned, attached, Running, the write in the driver's volume" "FAILED: no write in the driver's volume" "$ms ms"
	fi
}
case_again() {
	local t0 ms uid
	uid="$(pod_uid "$STS_POD")"
	t0="$(now_us)"
	kc delete pod "$STS_POD" --wait=false >/dev/null
	if ! await 180 is_running_after "$STS_POD" "$t0" "$uid"; then
		result again "the next pod Running on the same volume, reading the data" "FAILED: no new pod Running in 180 s" ""
		return
	fi
	ms="$(ms_since "$t0" "$(running_after "$STS_POD" "$t0" "$uid")")"
	if await 30 log_has "$STS_POD" found-first; then
		result again "the next pod Running on the same volume, reading the data" ok "$ms ms"
	else
		result again "the next pod Running on the same volume, reading the data" "FAILED: the data was not found" "$ms ms"
	fi
}

# kill9
case_kill9() {
	local before after local_id sts_id publishes
	before="$(mounts_under_root)"
	local_id="$(container_id "${POD_PREFIX}local")"
	sts_id="$(container_id "$STS_POD")"
	publishes="$(csi_count NodePublishVolume)"
	kill -KILL "$AGENT_PID"
	wait_gone "$AGENT_PID" 10 || true
	# kubelet-rs is this shell's child: reaped here (the upstream kubelet is not).
	wait "$AGENT_PID" 2>/dev/null || true
	AGENT_PID=""
	start_agent
	sleep 10
	after="$(mounts_under_root)"
	local what="same containers, same mounts"
	if ! agent_alive; then
		result kill9 "$what" "FAILED: the agent exited" ""
	elif [[ "$(container_id "${POD_PREFIX}local")" != "$local_id" || "$(container_id "$STS_POD")" != "$sts_id" ]]; then
		result kill9 "$what" "FAILED: a container changed" ""
	elif [[ "$before" != "$after" ]]; then
		result kill9 "$what" "FAILED: mounts $(wc -l <<<"$before") before, $(wc -l <<<"$after") after" ""
	else
		# Not a failure: upstream sets a reconstructed volume up again (an idempotent
		# NodePublishVolume); kubelet-rs leaves a mounted one alone.
		result kill9 "$what" "ok ($(wc -l <<<"$after") mounts; NodePublishVolume again: $(($(csi_count NodePublishVolume) - publishes)))" ""
	fi
}

# fail
case_fail() {
	local pod="${POD_PREFIX}inline" t0 ms uid
	local want="MountVolume.SetUp failed for volume \"data\" : rpc error: code = Internal desc = injected NodePublishVolume failure"
	local what="FailedMount in upstream's words, no mount folder; Running once the driver publishes"
	: >"$CSI/fail-publish"
	pod_yaml "$pod" 'echo ok > /data/f; sleep 3600' "    csi: {driver: $DRIVER}" | kc create -f - >/dev/null
	if ! await 90 event_has "$pod" FailedMount "$want"; then
		result fail "$what" "FAILED: no such FailedMount; got: $(event_messages "$pod" FailedMount | head -1)" ""
		rm -f "$CSI/fail-publish"
		return
	fi
	uid="$(pod_uid "$pod")"
	if [[ -e "$ROOT/pods/$uid/volumes/kubernetes.io~csi/data/mount" ]]; then
		result fail "$what" "FAILED: a mount folder after the failed publish" ""
		rm -f "$CSI/fail-publish"
		return
	fi
	t0="$(now_us)"
	rm -f "$CSI/fail-publish"
	if ! await 180 is_running_after "$pod" "$t0"; then
		result fail "$what" "FAILED: not Running in 180 s once the driver publishes" ""
		return
	fi
	ms="$(ms_since "$t0" "$(running_after "$pod" "$t0")")"
	result fail "$what" ok "$ms ms"
}

# clean
case_clean() {
	local t0 ms
	local what="nothing mounted under the root dir, unpublished and unstaged"
	t0="$(now_us)"
	kc delete statefulset "$STS" --wait=false >/dev/null
	kc delete pods -l app=krs-storage --wait=false >/dev/null
	kc delete pvc --all --wait=false >/dev/null
	unstaged() { [[ "$(csi_count NodeUnstageVolume)" -ge 1 ]]; }
	if await 180 no_mounts_under_root && await 60 unstaged; then
		ms="$(ms_since "$t0" "$(now_us)")"
		result clean "$what" ok "$ms ms"
	else
		result clean "$what" "FAILED: left mounted: $(mounts_under_root | tr '\n' ' ')" ""
	fi
}

case_local
if case_sts; then
	case_again
	case_kill9
fi
case_fail
case_clean

echo
echo "### $AGENT (node $NODE, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| case | checked | result | time |"
echo "|---|---|---|---|"
printf '%s\n' "${RESULTS[@]}"
