#!/usr/bin/env bash
# Deploys metrics-server (deploy/metrics-server/components.yaml, upstream's manifests) on the
# control plane hack/cluster/up.sh started, as a pod on one kubelet-rs node, and waits until the
# metrics API answers: the v1beta1.metrics.k8s.io APIService is Available and
# `kubectl top node NODE` prints the node's figures. --delete removes it all again (the
# APIService first, so the apiserver stops routing to it before the pod goes).
#
#   hack/cluster/metrics-server.sh --dir CLUSTER_DIR --node NODE_NAME [--timeout SECONDS]
#   hack/cluster/metrics-server.sh --dir CLUSTER_DIR --delete
#
# The node must run kubelet-rs with the metrics-server image in its containerd namespace
# (hack/build-images.sh builds it; the node pulls nothing). --timeout (default 600) bounds the
# wait: metrics-server answers for a node only after two scrapes 15 s apart, once its pod is up.
#
# Why a patch on top of the usual manifests: this machine dials only loopback and the pods on its
# own CNI bridge, and has no kube-proxy. A real cluster needs none of this. Applied with kustomize
# (kubectl apply -k), so the one Deployment is created as it will run:
#   - nodeSelector to NODE: the only node metrics-server can reach (below);
#   - KUBERNETES_SERVICE_HOST/PORT = 10.88.0.1:<apiserver port>: in-cluster config would dial
#     the service IP 10.96.0.1, which nothing routes here; the apiserver listens on the bridge's
#     gateway too (hack/cluster/up.sh);
#   - --kubelet-preferred-address-types=Hostname, and a hostAliases entry NODE -> 10.88.0.1: the
#     node's InternalIP is the VM's own address, never dialled; its name, resolved in the pod to
#     the gateway, reaches the agent on its port from status.daemonEndpoints
#     (--kubelet-use-node-status-port; the agent listens on 0.0.0.0). Other nodes of the shared
#     test cluster resolve nowhere from the pod and go unscraped;
#   - --kubelet-insecure-tls: test nodes serve with self-signed certificates.
# The apiserver reaches the pod at its pod IP through --enable-aggregator-routing (up.sh).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

DIR=/var/lib/kubelet-rs-cluster
NODE=""
DELETE=0
TIMEOUT=600
while (($# > 0)); do
	case "$1" in
	--dir) DIR="$2"; shift ;;
	--node) NODE="$2"; shift ;;
	--delete) DELETE=1 ;;
	--timeout) TIMEOUT="$2"; shift ;;
	-h | --help) sed -n '2,31s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
[[ -f "$DIR/env" ]] || die "no control plane in $DIR; run hack/cluster/up.sh first"
# shellcheck disable=SC1091
source "$DIR/env"
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout 30s "$@"; }

# The bridge's gateway (hack/setup-node.sh's kubers0): the host as pods see it.
POD_GATEWAY=10.88.0.1
API_PORT="${KUBELET_RS_CLUSTER_SERVER##*:}"
MANIFEST="$KUBELET_RS_ROOT/deploy/metrics-server/components.yaml"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/krs-metrics-server.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# kustomize loads resources only from inside the kustomization's folder.
cp "$MANIFEST" "$WORK/components.yaml"

if ((DELETE)); then
	kc delete apiservice v1beta1.metrics.k8s.io --ignore-not-found --wait=true >/dev/null
	printf 'resources:\n- components.yaml\n' >"$WORK/kustomization.yaml"
	kc delete -k "$WORK" --ignore-not-found --wait=true >/dev/null
	log "metrics-server removed from $DIR"
	exit 0
fi

[[ -n "$NODE" ]] || die "--node NODE_NAME is required (see --help)"
kc get node "$NODE" >/dev/null || die "node $NODE is not registered in $DIR"

cat >"$WORK/kustomization.yaml" <<KUSTOMIZATION
resources:
- components.yaml
patches:
- path: this-machine.yaml
KUSTOMIZATION
# Strategic merge: containers merge by name, env by name, hostAliases by ip; args, a list of
# strings, is replaced whole (upstream's, with the address types changed and insecure TLS).
cat >"$WORK/this-machine.yaml" <<PATCH
apiVersion: apps/v1
kind: Deployment
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  template:
    spec:
      nodeSelector:
        kubernetes.io/hostname: "$NODE"
      hostAliases:
      - ip: "$POD_GATEWAY"
        hostnames: ["$NODE"]
      containers:
      - name: metrics-server
        args:
        - --cert-dir=/tmp
        - --secure-port=10250
        - --kubelet-preferred-address-types=Hostname
        - --kubelet-use-node-status-port
        - --metric-resolution=15s
        - --kubelet-insecure-tls
        env:
        - name: KUBERNETES_SERVICE_HOST
          value: "$POD_GATEWAY"
        - name: KUBERNETES_SERVICE_PORT
          value: "$API_PORT"
PATCH
kc apply -k "$WORK" >/dev/null
log "applied metrics-server for node $NODE; waiting up to ${TIMEOUT}s for the metrics API"

deadline=$((SECONDS + TIMEOUT))
apiservice_available() {
	[[ "$(kc get apiservice v1beta1.metrics.k8s.io \
		-o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" == True ]]
}
# On a timeout: what the pieces say, so the failure names the one at fault.
explain() {
	kc -n kube-system get pods -l k8s-app=metrics-server -o wide 2>&1 || true
	kc get apiservice v1beta1.metrics.k8s.io -o jsonpath='{.status.conditions}' 2>&1 || true
	echo
	kc -n kube-system logs deployment/metrics-server --tail 30 2>&1 || true
}
until apiservice_available; do
	((SECONDS < deadline)) || { explain >&2; die "the APIService v1beta1.metrics.k8s.io is not Available after ${TIMEOUT}s"; }
	sleep 2
done
log "APIService v1beta1.metrics.k8s.io Available after ${SECONDS}s"
until out="$(kc top node "$NODE" --no-headers 2>&1)"; do
	((SECONDS < deadline)) || { explain >&2; die "kubectl top node $NODE does not answer after ${TIMEOUT}s: $out"; }
	sleep 5
done
log "kubectl top node after ${SECONDS}s: $out"
