#!/usr/bin/env bash
# End-to-end check of kind clusters of kubelet-rs nodes (issue 29), on kind's podman provider:
#   1. builds (or reuses) the node image (hack/kind/build-node-image.sh);
#   2. creates a 2-node cluster (hack/kind/cluster.yaml) and waits for both nodes Ready;
#   3. loads the locally built agnhost image with `kind load image-archive` (not preloaded);
#   4. runs a 2-replica Deployment spread over both nodes and a ClusterIP Service, and reaches
#      both pods through the Service from each node, pod to pod across nodes, and the Service
#      by its DNS name (CoreDNS) from a pod;
#   5. `kind export logs` (journal, kubelet log, crictl images from every node);
#   6. deletes the cluster; the host's global sysctls and /etc/cni/net.d are as before.
# Every missing part is an error, never a skip.
#
#   hack/kind/e2e.sh [--no-build] [--keep] [--kubelet-rs-bin PATH]
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib-k8s.sh"
# shellcheck source=hack/kind/lib-kind.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-kind.sh"
require_root
require_cmd podman

HERE="$KUBELET_RS_ROOT/hack/kind"
NAME="${KIND_E2E_CLUSTER:-krs-e2e}"
BUILD=1 KEEP=0 BUILD_ARGS=()
while (($#)); do
	case "$1" in
	--no-build) BUILD=0; shift ;;
	--keep) KEEP=1; shift ;;
	--kubelet-rs-bin) BUILD_ARGS+=(--kubelet-rs-bin "$2"); shift 2 ;;
	*) die "unknown argument $1" ;;
	esac
done
export KIND_EXPERIMENTAL_PROVIDER=podman
KUBECTL="$KIND_BIN_DIR/kubectl-$K8S_VERSION"
AGNHOST_TAR="$IMAGE_CACHE_DIR/e2e-agnhost.oci.tar"
AGNHOST=registry.k8s.io/e2e-test-images/agnhost:2.56
# Kernel-global sysctls a node must never write (the node's /proc/sys is the host's).
SYSCTLS=(fs.file-max fs.nr_open kernel.pid_max kernel.sysrq kernel.panic kernel.panic_on_oops vm.overcommit_memory
	vm.panic_on_oom fs.protected_regular fs.protected_fifos fs.inotify.max_user_watches
	fs.inotify.max_user_instances net.netfilter.nf_conntrack_max kernel.keys.root_maxkeys
	kernel.keys.root_maxbytes)
host_state() {
	# A key this kernel lacks is left out (sysctl prints the others).
	sysctl "${SYSCTLS[@]}" 2>/dev/null || true
	(cd /etc/cni/net.d && sha256sum -- * 2>/dev/null)
}

WORKDIR="$(mktemp -d /tmp/kind-e2e.XXXXXX)"
KCFG="$WORKDIR/kubeconfig"
k() { "$KUBECTL" --kubeconfig "$KCFG" "$@"; }
cleanup() {
	if ((KEEP == 0)); then "$KIND" delete cluster --name "$NAME" >/dev/null 2>&1 || true; fi
	rm -rf "$WORKDIR"
}
trap cleanup EXIT
step() { log "== $* ($((SECONDS - T0))s)"; }
T0=$SECONDS

# Idempotent, and it measures the rlimits podman gives runc from this very shell.
"$HERE/setup-host.sh"
if ((BUILD)); then
	"$HERE/build-node-image.sh" ${BUILD_ARGS[@]+"${BUILD_ARGS[@]}"}
fi
[[ -x "$KIND" && -x "$KUBECTL" ]] || die "kind or kubectl missing in $KIND_BIN_DIR: run hack/kind/build-tools.sh"
podman image exists "$KIND_NODE_IMAGE" || die "node image $KIND_NODE_IMAGE missing: run hack/kind/build-node-image.sh"
if [[ ! -f "$AGNHOST_TAR" ]]; then
	"$KUBELET_RS_ROOT/hack/build-images.sh" >/dev/null || die "hack/build-images.sh failed"
fi
[[ -f "$AGNHOST_TAR" ]] || die "$AGNHOST_TAR missing after hack/build-images.sh"
before="$(host_state)"

step "create cluster $NAME"
"$KIND" delete cluster --name "$NAME" >/dev/null 2>&1 || true
t=$SECONDS
"$KIND" create cluster --name "$NAME" --image "$KIND_NODE_IMAGE" --config "$HERE/cluster.yaml" \
	--kubeconfig "$KCFG" --wait 5m || die "kind create cluster failed"
log "cluster created in $((SECONDS - t))s"
for n in $("$KIND" get nodes --name "$NAME"); do
	v="$(podman exec "$n" /usr/bin/kubelet --version 2>&1 || true)"
	[[ "$v" == *kubelet-rs* || "$v" == *"$K8S_VERSION"* ]] || die "$n: /usr/bin/kubelet --version printed '$v'"
	podman exec "$n" crictl ps >/dev/null || die "$n: crictl ps failed"
done
k wait --for=condition=Ready node --all --timeout=300s || die "nodes not Ready"
k get nodes -o wide
[[ "$(k get nodes --no-headers | wc -l)" == 2 ]] || die "expected 2 nodes"

step "kind load image-archive $AGNHOST_TAR"
"$KIND" load image-archive "$AGNHOST_TAR" --name "$NAME" || die "kind load failed"

step "Deployment and Service across both nodes"
k apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: agnhost
        image: $AGNHOST
        imagePullPolicy: Never
        args: [netexec, --http-port=8080]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /hostname, port: 8080}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
YAML
k rollout status deployment/web --timeout=300s || { k describe pods -l app=web; die "Deployment web not available"; }
k get pods -l app=web -o wide
mapfile -t pods < <(k get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}')
[[ ${#pods[@]} == 2 ]] || die "expected 2 web pods, got ${#pods[@]}"
read -r p0 n0 ip0 <<<"${pods[0]}"
read -r p1 n1 ip1 <<<"${pods[1]}"
[[ "$n0" != "$n1" ]] || die "both web pods on $n0"
# Pod to pod across nodes, both ways.
[[ "$(k exec "$p0" -- /agnhost connect --timeout=5s "$ip1:8080" 2>&1; echo rc=$?)" == *rc=0* ]] ||
	die "$p0 ($n0) cannot reach $p1 at $ip1:8080 ($n1)"
[[ "$(k exec "$p1" -- /agnhost connect --timeout=5s "$ip0:8080" 2>&1; echo rc=$?)" == *rc=0* ]] ||
	die "$p1 ($n1) cannot reach $p0 at $ip0:8080 ($n0)"
# Through the Service from each node: both pods answer (kube-proxy's random choice, so ask
# until both hostnames were seen; 60 tries is an upper bound).
svc="$(k get service web -o jsonpath='{.spec.clusterIP}')"
for n in "$n0" "$n1"; do
	seen=""
	for _ in $(seq 60); do
		h="$(podman exec "$n" curl -s --max-time 3 "http://$svc/hostname" || true)"
		[[ -n "$h" && " $seen " != *" $h "* ]] && seen="$seen $h"
		[[ " $seen " == *" $p0 "* && " $seen " == *" $p1 "* ]] && break
	done
	[[ " $seen " == *" $p0 "* && " $seen " == *" $p1 "* ]] || die "from $n, Service $svc answered by:$seen (want $p0 and $p1)"
	log "from $n the Service reached both pods:$seen"
done

# A pod resolves the Service's name through CoreDNS (preloaded image, kubeadm's Deployment) and
# reaches it: agnhost's /dial makes the request from inside the pod on the other node.
k -n kube-system rollout status deployment/coredns --timeout=300s || die "CoreDNS not available"
out=""
for _ in $(seq 20); do
	out="$(podman exec "$n0" curl -s --max-time 10 \
		"http://$ip1:8080/dial?request=hostname&protocol=http&host=web.default.svc.cluster.local&port=80&tries=1" || true)"
	[[ "$out" == *'"responses":["web-'* ]] && break
	sleep 2
done
[[ "$out" == *'"responses":["web-'* ]] || die "pod $p1 could not reach web.default.svc.cluster.local: $out"
log "pod $p1 reached the Service by its DNS name: $out"

step "kind export logs"
"$KIND" export logs "$WORKDIR/logs" --name "$NAME" >/dev/null || die "kind export logs failed"
for n in "$n0" "$n1"; do
	for f in kubelet.log containerd.log images.log journal.log; do
		[[ -s "$WORKDIR/logs/$n/$f" ]] || die "kind export logs: $n/$f missing or empty"
	done
	grep -q agnhost "$WORKDIR/logs/$n/images.log" || die "$n/images.log (crictl images) lacks agnhost"
done
log "logs of both nodes exported (kubelet, containerd, journal, crictl images)"

if ((KEEP == 0)); then
	step "delete cluster"
	"$KIND" delete cluster --name "$NAME" || die "kind delete cluster failed"
	[[ -z "$(podman ps -a --filter "label=io.x-k8s.kind.cluster=$NAME" -q)" ]] || die "node containers left after delete"
fi
after="$(host_state)"
[[ "$before" == "$after" ]] || die "host state changed:
$(diff <(echo "$before") <(echo "$after"))"
log "host-global sysctls and /etc/cni/net.d unchanged"
echo "kind e2e: 1 passed, 0 failed ($((SECONDS - T0))s)"
