# Versions and paths shared by the hack/kind scripts. Source it after lib.sh and lib-k8s.sh.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are for the scripts that source this file

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
# cri-tools tracks Kubernetes minors; v1.34.0 is the one served for 1.34.
CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
# The etcd and CoreDNS versions kubeadm $K8S_VERSION deploys (cmd/kubeadm/app/constants): the
# images are tagged as kubeadm expects, so it finds them preloaded and pulls nothing.
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
ETCD_IMAGE_TAG="${ETCD_VERSION#v}-0"
COREDNS_VERSION="${COREDNS_VERSION:-v1.12.1}"
PAUSE_IMAGE_TAG=3.10.1

KIND_CACHE="$KUBELET_RS_CACHE/kind"
KIND_BIN_DIR="$KIND_CACHE/bin"
KIND="$KIND_BIN_DIR/kind-$KIND_VERSION"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-localhost/kubelet-rs-kind-node:$K8S_VERSION}"
IMAGE_CACHE_DIR="$KUBELET_RS_CACHE/images"
