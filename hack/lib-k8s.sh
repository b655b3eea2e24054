# The Kubernetes module at one pinned version, as hack/cluster/build.sh (the control plane) and
# hack/conformance.sh (the node e2e suite) build from it. Source it after lib.sh; do not run it.
#
# Environment: KUBELET_RS_K8S_VERSION (default v1.34.4).

K8S_VERSION="${KUBELET_RS_K8S_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
# Everything built from this version is cached here, outside the repository.
K8S_BUILD_DIR="$KUBELET_RS_CACHE/k8s/$K8S_VERSION"

# Every staging module k8s.io/kubernetes requires at version v0.0.0 must be replaced by its
# published tag, or `go mod tidy` cannot resolve the graph.
K8S_STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
	cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
	cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
	kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
	mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)

# Go for a build of this version (lib.sh's ensure_go); WHAT names the build in the error.
k8s_ensure_go() { ensure_go "$1 $K8S_VERSION"; }

# k8s_go_mod MODULE_PATH: a go.mod on stdout requiring k8s.io/kubernetes at K8S_VERSION with
# the staging replacements.
k8s_go_mod() {
	local m
	echo "module $1"
	echo
	echo "go 1.24"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	for m in "${K8S_STAGING[@]}"; do
		echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"
	done
}

# The version stamp `kubectl version` and the apiserver's /version report, as a release build's.
k8s_version_ldflags() {
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}
