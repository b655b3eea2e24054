#!/usr/bin/env bash
# Starts a real Kubernetes control plane on loopback: etcd, kube-apiserver (TLS, Node,RBAC
# authorization, NodeRestriction, bootstrap tokens), kube-controller-manager (with the CSR
# signer and approver) and kube-scheduler, built by hack/cluster/build.sh. Writes the
# certificates (every one X.509 v3: rustls refuses v1), an admin kubeconfig for kubectl and the
# controllers, the apiserver's kubelet client certificate, and an `env` file to source. Nodes get
# their kubeconfigs from hack/cluster/node-kubeconfig.sh, or bootstrap kubeconfigs (a bootstrap
# token of their own) from hack/cluster/bootstrap-kubeconfig.sh.
#
#   hack/cluster/up.sh [--dir DIR] [--port-offset N] [--audit] [--signing-duration D]
#   hack/cluster/down.sh [--dir DIR]
#   hack/cluster/component.sh stop|start NAME [--dir DIR]   one component (e.g. kube-apiserver)
#
# --dir (default /var/lib/kubelet-rs-cluster) holds certificates, data, logs and pid files; an
# existing directory is reused (certificates kept, etcd data wiped so every start is a fresh
# cluster). --port-offset N moves every port by N, so two control planes can run at once
# (apiserver 6443+N, etcd 2379+N and 2380+N, controller-manager 10257+N, scheduler 10259+N).
# --audit makes the apiserver log every request at level Metadata (who, verb, resource, code;
# no bodies) to DIR/logs/audit.log, one JSON event per line (hack/bench/cluster.sh counts a
# node's requests there).
# --signing-duration D (a Go duration, default the controller-manager's 1 year) is the lifetime of
# the certificates the controller-manager signs for CSRs (--cluster-signing-duration): short ones
# make nodes rotate their certificates within a test.
#
# As `kubeadm init` does, the cluster gets a bootstrap token (kube-system Secret
# bootstrap-token-<id>, group system:bootstrappers:kubeadm:default-node-token; its
# `<id>.<secret>` is KUBELET_RS_BOOTSTRAP_TOKEN in the env file) and kubeadm's bindings: that
# group may create CSRs (system:node-bootstrapper) that are approved for node client certificates
# (nodeclient), and nodes' renewals of their own client certificates are approved
# (selfnodeclient). Serving-certificate CSRs (kubernetes.io/kubelet-serving) wait for
# `kubectl certificate approve`, as on a kubeadm cluster.
#
# The aggregation layer is on as kubeadm configures it (a front-proxy CA and its
# front-proxy-client certificate, the --requestheader-* and --proxy-client-* flags), with
# --enable-aggregator-routing: with no kube-proxy here, the apiserver dials an aggregated API's
# endpoints (a pod IP on the CNI bridge) rather than its service IP. The apiserver listens on
# every address, so pods reach it at the bridge's gateway 10.88.0.1 (in its certificate's SANs);
# it still advertises 127.0.0.1. hack/cluster/metrics-server.sh deploys metrics-server on this.
# The controller-manager's HPA sync period is 5 s (upstream 15 s), so autoscaling tests react fast.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

DIR=/var/lib/kubelet-rs-cluster
OFFSET=0
AUDIT=0
SIGNING_DURATION=""
while (($# > 0)); do
	case "$1" in
	--dir) DIR="$2"; shift ;;
	--port-offset) OFFSET="$2"; shift ;;
	--audit) AUDIT=1 ;;
	--signing-duration) SIGNING_DURATION="$2"; shift ;;
	-h | --help) sed -n '2,40s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

require_root
require_cmd openssl etcd curl
BIN="$("$KUBELET_RS_ROOT/hack/cluster/build.sh" --print)"
"$KUBELET_RS_ROOT/hack/cluster/build.sh"

API_PORT=$((6443 + OFFSET))
ETCD_PORT=$((2379 + OFFSET))
ETCD_PEER_PORT=$((2380 + OFFSET))
KCM_PORT=$((10257 + OFFSET))
SCHED_PORT=$((10259 + OFFSET))
PKI="$DIR/pki"
# The CNI bridge's gateway (hack/setup-node.sh's kubers0): the host as pods see it.
POD_GATEWAY=10.88.0.1
LOGS="$DIR/logs"

"$KUBELET_RS_ROOT/hack/cluster/down.sh" --dir "$DIR" >/dev/null 2>&1 || true
mkdir -p "$PKI" "$LOGS" "$DIR/run" "$DIR/nodes"
rm -rf "$DIR/etcd" "${LOGS:?}"/*.log

# shellcheck source=hack/cluster/pki.sh
source "$KUBELET_RS_ROOT/hack/cluster/pki.sh"
pki_ca "$PKI"
[[ -s "$PKI/sa.key" && -s "$PKI/sa.pub" ]] || {
	quiet "making the service-account key" openssl genrsa -out "$PKI/sa.key" 2048
	quiet "writing the service-account public key" openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
}
# IP:10.88.0.1, the CNI bridge's gateway: pods reach the apiserver there (see the apiserver's
# --bind-address below), as there is no kube-proxy to route the service IP 10.96.0.1.
pki_cert "$PKI" apiserver "/CN=kube-apiserver" serverAuth \
	"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$POD_GATEWAY"
pki_cert "$PKI" admin "/O=system:masters/CN=kubernetes-admin" clientAuth
pki_cert "$PKI" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
# The aggregation layer (as kubeadm sets it up): the apiserver proxies requests for aggregated
# APIs (metrics.k8s.io from metrics-server) with this client certificate, signed by a CA of its
# own, and passes the caller's identity in X-Remote-* headers that the extension server trusts
# only from that CA and that name.
pki_named_ca "$PKI" front-proxy-ca front-proxy-ca
pki_cert_by "$PKI" front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth

SERVER="https://127.0.0.1:$API_PORT"
write_kubeconfig "$DIR/admin.kubeconfig" "$SERVER" "$PKI/ca.crt" "$PKI/admin.crt" "$PKI/admin.key" kubernetes-admin
cat >"$DIR/env" <<ENV
export KUBECONFIG=$DIR/admin.kubeconfig
export KUBECTL=$BIN/kubectl
export KUBELET_RS_CLUSTER_DIR=$DIR
export KUBELET_RS_CLUSTER_SERVER=$SERVER
ENV

# Each component's command line is kept (NUL-separated) beside its pid, so
# hack/cluster/component.sh can stop and start one alone (the outage tests stop the apiserver).
start() {
	local name="$1"
	shift
	printf '%s\0' "$@" >"$DIR/run/$name.cmd"
	"$@" >>"$LOGS/$name.log" 2>&1 &
	echo $! >"$DIR/run/$name.pid"
}

start etcd etcd --name krs --data-dir "$DIR/etcd" \
	--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "krs=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ""
wait_for "etcd" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

AUDIT_FLAGS=()
if ((AUDIT)); then
	# RequestReceived and ResponseComplete for each request (watches too: ResponseStarted is
	# left out, so a request's first event is always RequestReceived).
	cat >"$DIR/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted"]
rules:
- level: Metadata
POLICY
	AUDIT_FLAGS=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$LOGS/audit.log"
		--audit-log-format json --audit-log-mode blocking --audit-log-maxsize 0)
fi

start kube-apiserver "$BIN/kube-apiserver" "${AUDIT_FLAGS[@]}" \
	--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
	--bind-address 0.0.0.0 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
	--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
	--client-ca-file "$PKI/ca.crt" \
	--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
	--service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--enable-bootstrap-token-auth \
	--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
	--kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types Hostname,InternalIP \
	--service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
	--requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
	--requestheader-allowed-names front-proxy-client \
	--requestheader-extra-headers-prefix X-Remote-Extra- \
	--requestheader-group-headers X-Remote-Group \
	--requestheader-username-headers X-Remote-User \
	--proxy-client-cert-file "$PKI/front-proxy-client.crt" \
	--proxy-client-key-file "$PKI/front-proxy-client.key" \
	--enable-aggregator-routing=true
wait_for "kube-apiserver" 90 curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$SERVER/readyz"

SIGNING_FLAGS=()
[[ -z "$SIGNING_DURATION" ]] || SIGNING_FLAGS=(--cluster-signing-duration "$SIGNING_DURATION")
# '*' keeps csrapproving (auto-approval through the bindings below) and csrsigning (the
# --cluster-signing-* CA signs approved CSRs of the kubernetes.io signers).
start kube-controller-manager "$BIN/kube-controller-manager" "${SIGNING_FLAGS[@]}" \
	--kubeconfig "$DIR/admin.kubeconfig" --authentication-kubeconfig "$DIR/admin.kubeconfig" \
	--authorization-kubeconfig "$DIR/admin.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
	--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
	--use-service-account-credentials \
	--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
	--leader-elect=false \
	--horizontal-pod-autoscaler-sync-period 5s \
	--controllers '*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
start kube-scheduler "$BIN/kube-scheduler" \
	--kubeconfig "$DIR/admin.kubeconfig" --authentication-kubeconfig "$DIR/admin.kubeconfig" \
	--authorization-kubeconfig "$DIR/admin.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false
kc() { "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }
# Pods need their namespace's default ServiceAccount, which the controller-manager creates.
wait_for "the default ServiceAccount" 60 kc -n default get serviceaccount default

# What `kubeadm init` creates for TLS bootstrapping (its phases/bootstraptoken/node): the
# bootstrappers may ask for node client certificates, which are then approved; nodes renew
# their own.
BOOTSTRAP_GROUP=system:bootstrappers:kubeadm:default-node-token
kc apply -f - >/dev/null <<RBAC
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-bootstrapper"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "$BOOTSTRAP_GROUP"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "$BOOTSTRAP_GROUP"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}
RBAC
# shellcheck source=hack/cluster/bootstrap-token.sh
source "$KUBELET_RS_ROOT/hack/cluster/bootstrap-token.sh"
TOKEN="$(bootstrap_token kc "the cluster's default node token (hack/cluster/up.sh)")"
echo "export KUBELET_RS_BOOTSTRAP_TOKEN=$TOKEN" >>"$DIR/env"
log "control plane up at $SERVER in ${SECONDS}s; source $DIR/env for kubectl"
