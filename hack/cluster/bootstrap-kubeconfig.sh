#!/usr/bin/env bash
# Gives a node what `kubeadm join` gives a kubelet: a bootstrap kubeconfig holding a fresh
# bootstrap token (group system:bootstrappers:kubeadm:default-node-token), with which the node
# asks the control plane hack/cluster/up.sh started for its client certificate (a CSR that the
# controller-manager approves and signs). Like node-kubeconfig.sh it points NAME at 127.0.0.1 in
# /etc/hosts. Prints the bootstrap kubeconfig's path.
#
#   hack/cluster/bootstrap-kubeconfig.sh NAME [--dir DIR]
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/cluster/bootstrap-token.sh
source "$KUBELET_RS_ROOT/hack/cluster/bootstrap-token.sh"

NAME="${1:?usage: bootstrap-kubeconfig.sh NAME [--dir DIR]}"
DIR=/var/lib/kubelet-rs-cluster
[[ "${2:-}" == --dir ]] && DIR="$3"
[[ -f "$DIR/env" ]] || die "no control plane in $DIR; run hack/cluster/up.sh first"
# shellcheck disable=SC1091
source "$DIR/env"
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

token="$(bootstrap_token kc "bootstrap token of node $NAME (hack/cluster/bootstrap-kubeconfig.sh)")"
mkdir -p "$DIR/nodes"
out="$DIR/nodes/$NAME.bootstrap-kubeconfig"
cat >"$out" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $KUBELET_RS_CLUSTER_SERVER
    certificate-authority: $DIR/pki/ca.crt
users:
- name: tls-bootstrap-token-user
  user:
    token: $token
contexts:
- name: tls-bootstrap-token-user@local
  context:
    cluster: local
    user: tls-bootstrap-token-user
current-context: tls-bootstrap-token-user@local
KUBECONFIG
chmod 600 "$out"
hosts_add_loopback "$NAME"
echo "$out"
