#!/usr/bin/env bash
# Gives a node its identity on the control plane hack/cluster/up.sh started: a client certificate
# for system:node:NAME in group system:nodes (what the Node authorizer and NodeRestriction key
# on), a kubeconfig using it, and `127.0.0.1 NAME` in /etc/hosts so the apiserver's calls to the
# node (logs, exec, metrics: it prefers the Hostname address) stay on loopback. Prints the
# kubeconfig's path.
#
#   hack/cluster/node-kubeconfig.sh NAME [--dir DIR]
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=hack/cluster/pki.sh
source "$KUBELET_RS_ROOT/hack/cluster/pki.sh"

NAME="${1:?usage: node-kubeconfig.sh NAME [--dir DIR]}"
DIR=/var/lib/kubelet-rs-cluster
[[ "${2:-}" == --dir ]] && DIR="$3"
[[ -f "$DIR/env" ]] || die "no control plane in $DIR; run hack/cluster/up.sh first"
# shellcheck disable=SC1091
source "$DIR/env"

pki_cert "$DIR/pki" "node-$NAME" "/O=system:nodes/CN=system:node:$NAME" clientAuth
mkdir -p "$DIR/nodes"
out="$DIR/nodes/$NAME.kubeconfig"
write_kubeconfig "$out" "$KUBELET_RS_CLUSTER_SERVER" "$DIR/pki/ca.crt" "$DIR/pki/node-$NAME.crt" \
	"$DIR/pki/node-$NAME.key" "system:node:$NAME"
hosts_add_loopback "$NAME"
echo "$out"
