#!/usr/bin/env bash
# Runs upstream's [NodeConformance] node e2e specs (k8s.io/kubernetes test/e2e_node at
# KUBELET_RS_K8S_VERSION, default v1.34.4) against the upstream kubelet and/or kubelet-rs, on
# this machine and offline: e2e_node.test starts its own etcd, kube-apiserver (127.0.0.1:6443)
# and namespace controller, then the agent under test as its `kubelet`, as upstream's node e2e
# CI does.
#
#   hack/conformance.sh [--agent both|kubelet-rs|upstream] [--fast | --features] [--focus RE] [--skip RE]
#                       [--skip-known] [--procs N] [--out DIR] [--kubelet-rs-bin PATH]
#   hack/conformance.sh --build-only   build (or reuse) binaries and images, import them, no run
#   hack/conformance.sh --build-e2e    build (or reuse) e2e_node.test, agnhost, nnp and ginkgo
#                                      only: no agent, no images, no containerd (hack/test.sh
#                                      builds them while cargo builds)
#   hack/conformance.sh --print        print the directory of e2e_node.test, agnhost, nnp, ginkgo
#
#   --agent A       who runs, one after the other (default both: upstream, then kubelet-rs)
#   --fast          the specs of hack/conformance-fast.txt (one regex a line), serially; fails
#                   unless every one of them passes on kubelet-rs
#   --features      the specs of the feature gates that are on by default in the pinned version
#                   (FEATURE_FOCUS below: GA and Beta gates), without [Alpha], [Serial], [Slow],
#                   [Flaky], [Disruptive] and [DRA] (no DRA driver here); --skip adds to that
#   --focus RE      the specs to run (default '\[NodeConformance\]'); not with --fast
#   --skip RE       the specs to leave out, instead of the default: [Serial], [Slow], [Flaky],
#                   [Disruptive], feature-gated specs, pulls from the internet, device plugins
#   --skip-known    also leave out what kubelet-rs is known not to do yet (KNOWN_GAPS below)
#   --procs N       parallel Ginkgo processes (default 1 with --fast, else 4)
#   --out DIR       results (default /var/lib/kubelet-rs-conformance/<UTC time>):
#                     <agent>/passed.txt, failed.txt   spec names, from <agent>/report.json
#                     <agent>/e2e.log, kubelet.log, junit_01.xml, kubelet-config.yaml
#                     diff.txt   what passed on one agent and not on the other (--fast: what
#                                of the list did not pass on kubelet-rs)
#   --kubelet-rs-bin PATH   the agent (default target/release/kubelet-rs, built with
#                   `cargo build --release` when missing); it also imports the images
#
# Built once, outside the repository: e2e_node.test, agnhost, nnp and ginkgo from the Kubernetes
# module (Go module proxy) in $KUBELET_RS_CACHE/k8s/<version>/e2e-bin; the test images the
# selected specs use, under their upstream names, as OCI tarballs $KUBELET_RS_CACHE/images/e2e-*
# (hack/lib-oci.sh: busybox, agnhost, pause, nonroot and nonewprivs rebuilt from source and
# Debian's busybox, nginx a busybox httpd stand-in), imported into containerd's namespaces
# kubelet-rs (kubelet-rs) and k8s.io (the upstream kubelet, through the CRI plugin). The suite
# runs with --prepull-images=false: it pulls nothing.
#
# Exit status: 0 when every selected spec passed on kubelet-rs (on upstream when only it ran);
# 1 when some failed, or with --fast when a spec of the list did not pass; 2 on a harness error
# (a failed BeforeSuite: system validation, services, agent start, node not Ready; or no report).
# Needs root, containerd, Go, jq, and ports 6443, 10248, 10250 and 10255 free (no
# hack/cluster/up.sh control plane, no other agent); nothing may run in containerd's kubelet-rs
# and k8s.io namespaces, which the agents share with other runs.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=hack/lib-oci.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-oci.sh"
# shellcheck source=hack/lib-k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib-k8s.sh"

BUILD_DIR="$K8S_BUILD_DIR"
# A module and bin directory of their own: hack/cluster/build.sh's `go mod tidy` would drop the
# test-only requirements, and its all_built check looks at bin/.
E2E_MODULE="$BUILD_DIR/e2e-module"
E2E_BIN="$BUILD_DIR/e2e-bin"
E2E_TOOLS=(e2e_node.test agnhost nnp ginkgo)

# The images of the selected specs, as test/utils/image/manifest.go names them at v1.34.4;
# checked against `e2e_node.test --list-images` after the build.
E2E_BUSYBOX=registry.k8s.io/e2e-test-images/busybox:1.37.0-1
E2E_AGNHOST=registry.k8s.io/e2e-test-images/agnhost:2.56
E2E_PAUSE=registry.k8s.io/pause:3.10.1
E2E_NGINX=registry.k8s.io/e2e-test-images/nginx:1.14-4
E2E_NONROOT=registry.k8s.io/e2e-test-images/nonroot:1.4
E2E_NONEWPRIVS=registry.k8s.io/e2e-test-images/nonewprivs:1.3

# The agent runs in its default namespace: the images must be there, whatever the caller's
# environment says.
KUBELET_RS_NAMESPACE=kubelet-rs
export KUBELET_RS_NAMESPACE
# Resolves to 127.0.0.1 (/etc/hosts), as the suite needs.
NODE_NAME=krs-e2e-node
# apiserver, kubelet healthz, kubelet, read-only port: fixed in the suite.
PORTS=(6443 10248 10250 10255)
FAST_LIST="$KUBELET_RS_ROOT/hack/conformance-fast.txt"
DEFAULT_FOCUS='\[NodeConformance\]'
# The node e2e specs gated by a feature that v1.34 turns on by default (their [FeatureGate:...]
# labels without [Alpha]; DynamicResourceAllocation's need a DRA driver, left out below).
FEATURE_FOCUS='\[FeatureGate:(SidecarContainers|InPlacePodVerticalScaling|PodLevelResources|SupplementalGroupsPolicy|UserNamespacesSupport)\]'
FEATURE_SKIP='\[Alpha\]|\[Serial\]|\[Slow\]|\[Flaky\]|\[Disruptive\]|\[DRA\]'
DEFAULT_SKIP='\[Serial\]|\[Slow\]|\[Flaky\]|\[Disruptive\]|\[Feature:|\[NodeFeature:|should be able to pull image|Device Plugin Failures'
# Specs that fail on kubelet-rs for want of a feature: the Summary API's PSI fields (cgroup
# v2 only; on this cgroup v1 machine the upstream kubelet fails the spec too).
KNOWN_GAPS='Summary API'
FAILED_STATES='["failed","timedout","panicked","aborted","interrupted"]'

usage() { sed -n '2,45s/^# \{0,1\}//p' "$0"; }

AGENT=both
FAST=0
FEATURES=0
FOCUS=""
SKIP=""
SKIP_SET=0
SKIP_KNOWN=0
PROCS=""
OUT=""
KRS_BIN_ARG=""
BUILD_ONLY=0
BUILD_E2E=0
parse_args() {
	while (($# > 0)); do
		case "$1" in
		--agent) AGENT="${2:?--agent needs a value}"; shift ;;
		--fast) FAST=1 ;;
		--features) FEATURES=1 ;;
		--focus) FOCUS="${2:?--focus needs a value}"; shift ;;
		--skip) SKIP="${2?--skip needs a value}"; SKIP_SET=1; shift ;;
		--skip-known) SKIP_KNOWN=1 ;;
		--procs) PROCS="${2:?--procs needs a value}"; shift ;;
		--out) OUT="${2:?--out needs a value}"; shift ;;
		--kubelet-rs-bin) KRS_BIN_ARG="${2:?--kubelet-rs-bin needs a value}"; shift ;;
		--build-only) BUILD_ONLY=1 ;;
		--build-e2e) BUILD_E2E=1 ;;
		--print) echo "$E2E_BIN"; exit 0 ;;
		-h | --help) usage; exit 0 ;;
		*) die "unknown argument '$1' (see --help)" ;;
		esac
		shift
	done
	case "$AGENT" in
	both) AGENTS=(upstream kubelet-rs) ;;
	kubelet-rs | upstream) AGENTS=("$AGENT") ;;
	*) die "--agent must be both, kubelet-rs or upstream, not '$AGENT'" ;;
	esac
	((FAST == 0)) || [[ -z "$FOCUS" ]] || die "--fast and --focus exclude each other"
	if ((FEATURES)); then
		((FAST == 0)) && [[ -z "$FOCUS" ]] || die "--features excludes --fast and --focus"
		FOCUS="$FEATURE_FOCUS"
		SKIP="$FEATURE_SKIP${SKIP:+|$SKIP}"
		SKIP_SET=1
	fi
	[[ -n "$FOCUS" ]] || FOCUS="$DEFAULT_FOCUS"
	((SKIP_SET)) || SKIP="$DEFAULT_SKIP"
	if ((SKIP_KNOWN)); then
		SKIP="${SKIP:+$SKIP|}$KNOWN_GAPS"
	fi
	[[ -n "$PROCS" ]] || { ((FAST)) && PROCS=1 || PROCS=4; }
	[[ "$PROCS" =~ ^[1-9][0-9]*$ ]] || die "--procs must be a positive number, not '$PROCS'"
	# Ginkgo's own limit per suite; the outer timeout only catches a suite that hangs past it.
	if ((FAST)); then SUITE_TIMEOUT=1h; else SUITE_TIMEOUT=6h; fi
	OUT_DEFAULT=0
	if [[ -z "$OUT" ]]; then
		OUT="/var/lib/kubelet-rs-conformance/$(date -u +%Y%m%dT%H%M%SZ)"
		OUT_DEFAULT=1
	fi
	# The suite runs in a work directory of its own: relative paths would point there.
	OUT="$(realpath -m "$OUT")"
}

# The unpacked k8s.io/kubernetes module: agnhost's version and TLS files come from it.
k8s_src() {
	local dir
	dir="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION"
	[[ -d "$dir" ]] || go mod download "k8s.io/kubernetes@$K8S_VERSION" >&2 ||
		die "cannot download k8s.io/kubernetes@$K8S_VERSION"
	echo "$dir"
}

write_module() {
	mkdir -p "$E2E_MODULE" "$E2E_BIN"
	k8s_go_mod kubelet-rs.local/k8s-e2e-node >"$E2E_MODULE/go.mod"
	rm -f "$E2E_MODULE/go.sum"
	cat >"$E2E_MODULE/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e_node"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
)
GO
}

# build_tool NAME COMMAND...: runs COMMAND (which writes $E2E_BIN/.NAME.tmp), then moves the
# result into place, so an interrupted build never leaves a binary that looks done.
build_tool() {
	local name="$1" start=$SECONDS
	shift
	[[ -x "$E2E_BIN/$name" ]] && return
	log "building $name $K8S_VERSION"
	(cd "$E2E_MODULE" && CGO_ENABLED=0 "$@") || die "building $name $K8S_VERSION failed: $*"
	mv "$E2E_BIN/.$name.tmp" "$E2E_BIN/$name"
	log "built $name in $((SECONDS - start))s"
}

build_e2e() {
	local tool missing=()
	for tool in "${E2E_TOOLS[@]}"; do
		[[ -x "$E2E_BIN/$tool" ]] || missing+=("$tool")
	done
	if ((${#missing[@]} == 0)); then
		log "e2e binaries $K8S_VERSION cached in $E2E_BIN"
	else
		k8s_ensure_go e2e_node.test
		mkdir -p "$BUILD_DIR"
		# Two runs would write the same module and binaries.
		exec 8>"$BUILD_DIR/.e2e-build.lock"
		flock 8
		log "building ${missing[*]} $K8S_VERSION into $E2E_BIN (a first build of e2e_node.test takes tens of minutes)"
		write_module
		(cd "$E2E_MODULE" && go mod tidy) || die "go mod tidy failed in $E2E_MODULE"
		# tidy records the sums the packages need, not those of their tests, and most of
		# test/e2e_node is _test.go files (the suite and every spec): add them, and do not
		# tidy again, which would drop them.
		(cd "$E2E_MODULE" && go get -t "k8s.io/kubernetes/test/e2e_node@$K8S_VERSION") ||
			die "go get -t k8s.io/kubernetes/test/e2e_node@$K8S_VERSION failed in $E2E_MODULE"
		local agnhost_version ldflags
		ldflags="$(k8s_version_ldflags)"
		agnhost_version="$(cat "$(k8s_src)/test/images/agnhost/VERSION")"
		# Same CGO and -trimpath settings as hack/cluster/build.sh, so the Go build cache of the
		# control plane (apiserver and kubelet packages are linked into e2e_node.test) is reused;
		# upstream builds the suite with CGO off too. No vet: this is not our code.
		build_tool e2e_node.test go test -c -vet=off -trimpath -ldflags "$ldflags" \
			-o "$E2E_BIN/.e2e_node.test.tmp" k8s.io/kubernetes/test/e2e_node
		build_tool agnhost go build -trimpath -ldflags "-s -w -X main.Version=$agnhost_version" \
			-o "$E2E_BIN/.agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
		build_tool nnp go build -trimpath -ldflags "-s -w" -o "$E2E_BIN/.nnp.tmp" \
			k8s.io/kubernetes/test/images/nonewprivs
		build_tool ginkgo go build -trimpath -ldflags "-s -w" -o "$E2E_BIN/.ginkgo.tmp" \
			github.com/onsi/ginkgo/v2/ginkgo
		rm -f "$E2E_BIN/tests.txt" "$E2E_BIN/images.txt"
		exec 8>&-
	fi
	# Cheap (no cluster): what this build can run, and with which images.
	if [[ ! -s "$E2E_BIN/tests.txt" ]]; then
		(cd "$E2E_BIN" && env -u KUBE_TEST_REPO_LIST ./e2e_node.test --list-tests) >"$E2E_BIN/.tests.txt.tmp" ||
			die "e2e_node.test --list-tests failed"
		mv "$E2E_BIN/.tests.txt.tmp" "$E2E_BIN/tests.txt"
	fi
	if [[ ! -s "$E2E_BIN/images.txt" ]]; then
		(cd "$E2E_BIN" && env -u KUBE_TEST_REPO_LIST ./e2e_node.test --list-images) >"$E2E_BIN/.images.txt.tmp" ||
			die "e2e_node.test --list-images failed"
		mv "$E2E_BIN/.images.txt.tmp" "$E2E_BIN/images.txt"
	fi
	# Spec names alone: the lines are "    FILE:LINE: NAME".
	sed -n 's/^ \{4\}[^ ]*:[0-9]*: //p' "$E2E_BIN/tests.txt" >"$E2E_BIN/spec-names.txt"
	log "e2e_node.test: $(wc -l <"$E2E_BIN/spec-names.txt") specs, $(grep -c '\[NodeConformance\]' "$E2E_BIN/spec-names.txt" || true) [NodeConformance] (list: $E2E_BIN/spec-names.txt)"
	local ref
	for ref in "$E2E_BUSYBOX" "$E2E_AGNHOST" "$E2E_PAUSE" "$E2E_NGINX" "$E2E_NONROOT" "$E2E_NONEWPRIVS"; do
		grep -qxF "$ref" "$E2E_BIN/images.txt" ||
			die "$ref is not among the images of e2e_node.test $K8S_VERSION ($E2E_BIN/images.txt): update the E2E_* names in $0"
	done
}

# The kubelet-rs binary: the agent under test, and the importer of the images.
resolve_kubelet_rs_bin() {
	if [[ -n "$KRS_BIN_ARG" ]]; then
		[[ -x "$KRS_BIN_ARG" ]] || die "--kubelet-rs-bin $KRS_BIN_ARG is not an executable file"
		KUBELET_RS_BIN="$(realpath "$KRS_BIN_ARG")"
	else
		KUBELET_RS_BIN="$KUBELET_RS_ROOT/target/release/kubelet-rs"
		if [[ ! -x "$KUBELET_RS_BIN" ]]; then
			require_cargo
			log "building kubelet-rs (release)"
			(cd "$KUBELET_RS_ROOT" && cargo build --release --bin kubelet-rs) || die "cargo build --release failed"
		fi
		# As /proc/PID/exe shows it (stop_leftovers compares the two).
		KUBELET_RS_BIN="$(realpath "$KUBELET_RS_BIN")"
	fi
	export KUBELET_RS_BIN
}

# e2e_inputs FILE...: the inputs hash of an e2e image made from FILE... and the busybox rootfs.
e2e_inputs() {
	{
		echo "arch $(oci_arch)"
		sha256sum "$KUBELET_RS_ROOT/hack/conformance.sh" "$KUBELET_RS_ROOT/hack/lib.sh" \
			"$KUBELET_RS_ROOT/hack/lib-oci.sh" "$BUSYBOX_BIN" "$@" | cut -d' ' -f1
	} | sha256_stdin
}

pause_e2e_inputs() {
	{
		e2e_inputs "$PAUSE_SRC"
		gcc --version | head -n1
		dpkg-query -W -f='${Version}\n' libc6-dev 2>/dev/null || true
	} | sha256_stdin
}

# As upstream's agnhost image (test/images/agnhost/Dockerfile) on a busybox base instead of
# alpine: /agnhost and its /agnhost-2 alias, the porter TLS pair at / (https netexec), /uploads,
# the image-defined user 1000 in group 50000, and a curl (busybox has none) for the exec hooks'
# `sh -c "curl http://..."`.
agnhost_rootfs() {
	local rootfs="$1" src
	src="$(k8s_src)/test/images/agnhost"
	busybox_rootfs "$rootfs"
	install -m 0755 "$E2E_BIN/agnhost" "$rootfs/agnhost"
	ln -s agnhost "$rootfs/agnhost-2"
	install -m 0644 "$src/porter/localhost.crt" "$rootfs/localhost.crt"
	install -m 0644 "$src/porter/localhost.key" "$rootfs/localhost.key"
	mkdir -p "$rootfs/uploads" "$rootfs/home/user-defined-in-image" "$rootfs/usr/bin"
	printf '%s\n' 'user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh' \
		>>"$rootfs/etc/passwd"
	printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' \
		>>"$rootfs/etc/group"
	# busybox's wget -T crashes on some kernels (this machine's): busybox timeout instead.
	cat >"$rootfs/usr/bin/curl" <<'SH'
#!/bin/sh
# curl for the e2e specs' exec commands, on busybox wget: one URL and the options they pass
# (-g -q -s -i -L ignored; -o FILE; -w with %{http_code}; --max-time and --connect-timeout).
out=- format= timeout= url=
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out="$2"; shift ;;
	-w) format="$2"; shift ;;
	-m | --max-time) timeout="$2"; shift ;;
	--connect-timeout) [ -n "$timeout" ] || timeout="$2"; shift ;;
	-*) ;;
	*) url="$1" ;;
	esac
	shift
done
if [ -z "$format" ]; then
	exec ${timeout:+timeout "$timeout"} wget -q -O "$out" "$url"
fi
code="$(${timeout:+timeout "$timeout"} wget -S -O "$out" "$url" 2>&1 |
	sed -n 's/^ *HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' | tail -n 1)"
printf '%s' "$format" | sed "s/%{http_code}/${code:-000}/g"
SH
	chmod 0755 "$rootfs/usr/bin/curl"
}

# Stand-in for nginx (used by the mirror pod specs as a long-running server): busybox's httpd on
# port 80 serving the directory nginx would.
nginx_rootfs() {
	local rootfs="$1"
	busybox_rootfs "$rootfs"
	mkdir -p "$rootfs/usr/share/nginx/html"
	echo 'kubelet-rs nginx stand-in' >"$rootfs/usr/share/nginx/html/index.html"
	chmod 0644 "$rootfs/usr/share/nginx/html/index.html"
}

# As upstream's nonewprivs image: a setuid-root nnp that prints its effective uid.
nonewprivs_rootfs() {
	local rootfs="$1"
	busybox_rootfs "$rootfs"
	mkdir -p "$rootfs/usr/local/bin"
	install -m 4755 "$E2E_BIN/nnp" "$rootfs/usr/local/bin/nnp"
}

# import_k8s_io NAME REF: the tarball into the k8s.io namespace, where the CRI plugin (the
# upstream kubelet's runtime) finds its images; ctr as hack/bench/upstream-kubelet.sh does, so
# the CRI plugin sees the import through containerd's events. Skipped when present and unpacked.
import_k8s_io() {
	local name="$1" ref="$2" tarball="$IMAGE_CACHE/$1.oci.tar" want have
	want="$(cat "$IMAGE_CACHE/$name.digest")"
	have="$(KUBELET_RS_NAMESPACE=k8s.io image_digest_in_containerd "$ref")"
	if [[ "$have" == "$want" ]] && KUBELET_RS_NAMESPACE=k8s.io image_unpacked "$tarball"; then
		log "$ref: already in containerd namespace k8s.io ($want, unpacked)"
		return
	fi
	log "$ref: importing into containerd namespace k8s.io"
	ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n k8s.io images import \
		--snapshotter "$SNAPSHOTTER" "$tarball" >/dev/null
	have="$(KUBELET_RS_NAMESPACE=k8s.io image_digest_in_containerd "$ref")"
	[[ "$have" == "$want" ]] || die "$ref: after import the k8s.io namespace shows digest '${have:-none}', expected $want"
	KUBELET_RS_NAMESPACE=k8s.io image_unpacked "$tarball" || die "$ref: imported into k8s.io but not unpacked for $SNAPSHOTTER"
}

build_images() {
	# The agents' own images first: kubelet-rs's sandbox image (pause:3.10) and the tarballs
	# upstream-kubelet.sh prepare imports for the CRI plugin.
	"$KUBELET_RS_ROOT/hack/build-images.sh" || die "hack/build-images.sh failed"
	if want_k8s_io; then
		"$KUBELET_RS_ROOT/hack/bench/upstream-kubelet.sh" prepare || die "hack/bench/upstream-kubelet.sh prepare failed"
	fi

	mkdir -p "$IMAGE_CACHE"
	# As build-images.sh: one build at a time on the cache.
	exec 9>"$IMAGE_CACHE/.lock"
	flock 9
	local env="\"Env\":[\"PATH=$DEFAULT_PATH\"]"
	local src
	src="$(k8s_src)"
	build_cached e2e-busybox "$E2E_BUSYBOX" "$(e2e_inputs)" busybox_rootfs "$env,\"Cmd\":[\"sh\"]"
	build_cached e2e-agnhost "$E2E_AGNHOST" \
		"$(e2e_inputs "$E2E_BIN/agnhost" "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key")" \
		agnhost_rootfs "$env,\"Entrypoint\":[\"/agnhost\"],\"Cmd\":[\"pause\"]"
	build_cached e2e-pause "$E2E_PAUSE" "$(pause_e2e_inputs)" pause_rootfs \
		"\"User\":\"65535:65535\",$env,\"Entrypoint\":[\"/pause\"],\"WorkingDir\":\"/\""
	build_cached e2e-nginx "$E2E_NGINX" "$(e2e_inputs)" nginx_rootfs \
		"$env,\"Cmd\":[\"httpd\",\"-f\",\"-p\",\"80\",\"-h\",\"/usr/share/nginx/html\"]"
	build_cached e2e-nonroot "$E2E_NONROOT" "$(e2e_inputs)" busybox_rootfs \
		"\"User\":\"1234\",$env,\"Cmd\":[\"sh\"]"
	build_cached e2e-nonewprivs "$E2E_NONEWPRIVS" "$(e2e_inputs "$E2E_BIN/nnp")" nonewprivs_rootfs \
		"$env,\"Cmd\":[\"nnp\"]"

	# kubelet-rs namespace, through kubelet-rs's importer, with a smoke run each.
	import_if_needed e2e-busybox "$E2E_BUSYBOX" ok echo ok
	import_if_needed e2e-agnhost "$E2E_AGNHOST" "$(cat "$src/test/images/agnhost/VERSION")" /agnhost --version
	import_if_needed e2e-pause "$E2E_PAUSE" "kubelet-rs pause" /pause -v
	import_if_needed e2e-nginx "$E2E_NGINX" ok sh -c 'test -f /usr/share/nginx/html/index.html && echo ok'
	import_if_needed e2e-nonroot "$E2E_NONROOT" 1234 id -u
	import_if_needed e2e-nonewprivs "$E2E_NONEWPRIVS" "Effective uid" /usr/local/bin/nnp
	if want_k8s_io; then
		local name
		for name in busybox agnhost pause nginx nonroot nonewprivs; do
			local var="E2E_${name^^}"
			import_k8s_io "e2e-$name" "${!var}"
		done
	fi
	exec 9>&-
}

# The upstream kubelet's images are needed when it runs, and prepared by --build-only.
want_k8s_io() {
	((BUILD_ONLY)) || [[ " ${AGENTS[*]} " == *" upstream "* ]]
}

# Both agents use the suite's fixed ports, /var/lib/kubelet, /var/log/pods and /kubepods; the
# upstream kubelet kills the CRI pods it does not know, and either may take over the other's
# cgroups: nothing else may be running.
check_free() {
	local port holder pid ns tasks
	for port in "${PORTS[@]}"; do
		holder="$(ss -ltnpH "sport = :$port" 2>/dev/null || true)"
		[[ -z "$holder" ]] || die "port $port is in use ($(grep -o 'users:.*' <<<"$holder" | head -n1)): stop what holds it (hack/cluster/down.sh for a control plane)"
	done
	if pid="$(cat /run/kubelet-rs.pid 2>/dev/null)" && pid_alive "$pid"; then
		die "kubelet-rs (pid $pid, /run/kubelet-rs.pid) is running; stop it first (hack/local-up.sh --down stops the quick start and removes its pods)"
	fi
	for ns in kubelet-rs k8s.io; do
		# (stopped tasks, of exited containers, do not count)
		tasks="$(ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$ns" tasks ls 2>/dev/null |
			awk 'NR > 1 && $3 != "STOPPED" { print $1 }' || true)"
		[[ -z "$tasks" ]] || die "$(wc -l <<<"$tasks") container(s) run in containerd namespace $ns; stop their agent (and its pods) first (for the quick start's: hack/local-up.sh --down)"
	done
	# Pods of any other agent or test in the kubepods cgroups: the upstream kubelet kills what it
	# does not know there.
	local procs
	procs="$(find /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null || true)"
	[[ -z "$procs" ]] || die "processes run in the kubepods cgroups (pids $(head -n 5 <<<"$procs" | paste -sd' ')...): stop the pods (and agent) that own them first"
}

# The suite starts the kubelet through systemd-run whenever that is on the PATH; PID 1 is not
# systemd here, so that start fails. The suite (and the kubelet it starts) get a PATH of links to
# everything else. journalctl goes too: with it the suite would ask journald (absent) for the
# containerd log instead of copying /var/log/containerd.log into the report directory.
make_run_path() {
	if [[ -d /run/systemd/system ]]; then
		RUN_PATH="$PATH"
		return
	fi
	local shadow="$WORK/path" dir entry name dirs
	mkdir -p "$shadow"
	IFS=: read -ra dirs <<<"$PATH"
	for dir in "${dirs[@]}"; do
		[[ "$dir" == /* && -d "$dir" ]] || continue
		for entry in "$dir"/*; do
			name="${entry##*/}"
			[[ -f "$entry" && -x "$entry" ]] || continue
			case "$name" in systemd-run | journalctl) continue ;; esac
			# The first PATH entry wins, as in a lookup.
			[[ -e "$shadow/$name" || -L "$shadow/$name" ]] || ln -s "$entry" "$shadow/$name"
		done
	done
	RUN_PATH="$shadow"
}

prepare_host() {
	hosts_add_loopback "$NODE_NAME"
	make_run_path
	# The base KubeletConfiguration of both agents; the suite adds its own fields (static pod
	# path, ports, authentication, kubeletCgroups=/kubelet and systemCgroups=/system, which is
	# why cgroupRoot must be /) and writes the result to <work dir>/kubelet-config. It writes
	# every field out again, without empty lists: `enforceNodeAllocatable: []` would come back
	# as the default (pods), so it is not set here.
	cat >"$WORK/base-kubelet-config.yaml" <<'YAML'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /
cgroupDriver: cgroupfs
failSwapOn: false
serializeImagePulls: false
# Static pod specs expect a manifest to be seen within 10 s.
fileCheckFrequency: 10s
volumeStatsAggPeriod: 10s
# No disk thresholds: never evict pods, nor delete images, on the shared disk; the imported
# images cannot be pulled again.
evictionHard:
  memory.available: 1Mi
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
}

# What exists before an agent runs, so that its clean-up removes only what the run added.
snapshot_state() {
	local work="$1" ns
	for ns in kubelet-rs k8s.io; do
		ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$ns" containers ls -q \
			>"$work/before.containers.$ns" 2>/dev/null || true
	done
	state_files >"$work/before.files"
	cgroup_dirs >"$work/before.cgroups"
	netns_pins >"$work/before.netns"
	ipam_leases >"$work/before.ipam"
}

# The pinned network namespaces (kubelet-rs's and the CRI plugin's, both /run/netns/cni-*).
netns_pins() { find /run/netns -mindepth 1 -maxdepth 1 2>/dev/null | sort || true; }

# host-local IPAM's leases: one file per address, naming the sandbox that holds it.
ipam_leases() { find /var/lib/cni/networks -mindepth 2 -maxdepth 2 -type f -name '[0-9a-f]*[.:]*' 2>/dev/null | sort || true; }

# The agents' files: the suite's --root-dir (its pods' directories too) and the pod logs.
state_files() {
	find /var/lib/kubelet /var/lib/kubelet/pods /var/log/pods /var/log/containers -mindepth 1 -maxdepth 1 \
		2>/dev/null | sort -u || true
}

# Top-level cgroups (the suite's /kubelet, /system, /docker-daemon) and everything under
# kubepods, in every hierarchy (cgroup v1) or the one tree (v2).
cgroup_dirs() {
	{
		find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d
		find /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/kubepods -type d
	} 2>/dev/null | sort -u || true
}

# new_lines BEFORE: lines of stdin not in the file BEFORE.
new_lines() { grep -vxF -f "$1" || true; }

# A kubelet (or the suite's services process) that outlived the suite: only processes of the
# binaries this run started.
stop_leftovers() {
	local agent_bin="$1" port pid exe
	for port in "${PORTS[@]}"; do
		for pid in $(ss -ltnpH "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
			exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
			if [[ "$exe" == "$agent_bin" || "$exe" == "$E2E_BIN/e2e_node.test" ]]; then
				warn "pid $pid ($exe) still listens on port $port after the suite; stopping it"
				stop_pid "$pid" "$exe (pid $pid)"
			fi
		done
	done
}

# Leaves the node as it was before AGENT ran: the suite deletes its namespaces (and the agent
# their pods) spec by spec, but pods still terminating when the suite ends stay behind.
cleanup_agent() {
	local agent="$1" work="$2" agent_bin="$3" ns id ids n mounts mnt
	stop_leftovers "$agent_bin"
	# kubelet-rs's namespace: the run's containers go, with their snapshots. k8s.io: the CRI
	# plugin owns those records, so only their processes are killed; the next upstream kubelet
	# removes the dead pods through the CRI.
	for ns in kubelet-rs k8s.io; do
		ids="$(ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$ns" containers ls -q 2>/dev/null |
			new_lines "$work/before.containers.$ns" || true)"
		[[ -n "$ids" ]] || continue
		if [[ "$ns" == kubelet-rs ]]; then
			warn "$agent: $(wc -l <<<"$ids") container(s) of this run left in containerd namespace $ns; removing them"
		fi
		for id in $ids; do
			ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$ns" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		[[ "$ns" == kubelet-rs ]] || continue
		for id in $ids; do
			KUBELET_RS_NAMESPACE=kubelet-rs remove_container "$id"
		done
	done
	# The network namespaces of pods left behind: their pins (a test that needs /run/netns to
	# itself waits for them), and their addresses in host-local IPAM, which names the sandbox.
	local pin
	while read -r pin; do
		[[ -n "$pin" ]] || continue
		if [[ -z "$(ip netns pids "$(basename "$pin")" 2>/dev/null)" ]]; then
			# A pin still mounted elsewhere (another mount namespace holds it) stays: a warning,
			# not the end of the clean-up (set -e stopped it before the results were written).
			ip netns delete "$(basename "$pin")" 2>/dev/null ||
				{ umount "$pin" 2>/dev/null; rm -f "$pin" 2>/dev/null; } ||
				warn "$agent: network namespace pin $pin is busy; it stays"
		fi
	done < <(netns_pins | new_lines "$work/before.netns")
	local live file
	live="$(for ns in kubelet-rs k8s.io; do
		ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$ns" containers ls -q 2>/dev/null || true
	done)"
	while read -r file; do
		[[ -n "$file" ]] || continue
		grep -qxF -- "$(head -n1 "$file")" <<<"$live" || rm -f "$file"
	done < <(ipam_leases | new_lines "$work/before.ipam")
	# Volume mounts of pods left behind, and the upstream kubelet's bind mount of its root dir
	# onto itself; deepest first.
	for ((n = 0; n < 3; n++)); do
		mapfile -t mounts < <(awk '$2 == "/var/lib/kubelet" || index($2, "/var/lib/kubelet/") == 1 { print length($2), $2 }' /proc/self/mounts |
			sort -rn | cut -d' ' -f2-)
		((${#mounts[@]} > 0)) || break
		for mnt in "${mounts[@]}"; do
			# Busy for a moment while the last processes of a pod exit.
			umount "$mnt" 2>/dev/null || sleep 1
		done
	done
	if grep -q ' /var/lib/kubelet/' /proc/self/mounts; then
		warn "$agent: mounts left under /var/lib/kubelet; its files stay"
	else
		state_files | new_lines "$work/before.files" | xargs -r rm -rf --
	fi
	# Empty cgroups the run created, deepest first; one with tasks stays (containerd itself, if
	# an agent moved it into the suite's --runtime-cgroups).
	local kept=()
	while read -r id; do
		rmdir "$id" 2>/dev/null || kept+=("$id")
	done < <(cgroup_dirs | new_lines "$work/before.cgroups" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
	((${#kept[@]} == 0)) || warn "$agent: ${#kept[@]} cgroup(s) of this run are not empty and stay, e.g. ${kept[0]}"
}

fast_regexes() { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$FAST_LIST"; }

# Every line of the fast list must select a spec of this build: a renamed spec would otherwise
# drop out of CI silently.
check_fast_list() {
	local re n bad=0
	while read -r re; do
		n="$(grep -cE -- "$re" "$E2E_BIN/spec-names.txt" || true)"
		if ((n == 0)); then
			warn "no spec of e2e_node.test $K8S_VERSION matches the $FAST_LIST line: $re"
			bad=1
		fi
	done < <(fast_regexes)
	((bad == 0)) || die "fix $FAST_LIST (spec names: $E2E_BIN/spec-names.txt)"
	FOCUS="$(fast_regexes | paste -sd'|' || true)"
	[[ -n "$FOCUS" ]] || die "$FAST_LIST lists no spec"
}

# spec_names REPORT STATES_JSON: the It specs of a Ginkgo JSON report in one of STATES, by full
# name (the container texts and the spec's, as --focus matches them), sorted.
spec_names() {
	jq -r --argjson states "$2" '.[].SpecReports[]? | select(.LeafNodeType == "It")
		| .State as $s | select(any($states[]; . == $s))
		| (.ContainerHierarchyTexts // []) + [.LeafNodeText] | map(select(. != "")) | join(" ")' "$1" |
		LC_ALL=C sort -u
}

HARNESS_ERROR=0
FAST_MISSING=0
declare -A RAN=() FAILED=()
summarize() {
	local agent="$1" rc="$2" secs="$3" dir="$OUT/$1" report="$OUT/$1/report.json" suite_fail
	if [[ ! -s "$report" ]]; then
		warn "$agent: no Ginkgo report after ${secs}s (e2e_node.test exited $rc); the end of $dir/e2e.log:"
		tail -n 30 "$dir/e2e.log" >&2 || true
		HARNESS_ERROR=1
		return
	fi
	if ! jq -e 'type == "array"' "$report" >/dev/null 2>&1; then
		warn "$agent: $report is not a Ginkgo JSON report (e2e_node.test exited $rc); see $dir/e2e.log"
		HARNESS_ERROR=1
		return
	fi
	suite_fail="$(jq -r '.[].SpecReports[]? | select(.LeafNodeType == "BeforeSuite" or .LeafNodeType == "SynchronizedBeforeSuite")
		| select(.State != "passed") | "\(.State): \((.Failure.Message // "")[0:1500])"' "$report")"
	if [[ -n "$suite_fail" ]]; then
		warn "$agent: the suite's set-up failed (nothing ran): $suite_fail"
		warn "$agent: see $dir/e2e.log and $dir/kubelet.log"
		HARNESS_ERROR=1
		return
	fi
	spec_names "$report" '["passed"]' >"$dir/passed.txt"
	spec_names "$report" "$FAILED_STATES" >"$dir/failed.txt"
	local passed failed
	passed="$(wc -l <"$dir/passed.txt")"
	failed="$(wc -l <"$dir/failed.txt")"
	RAN[$agent]=1
	FAILED[$agent]="$failed"
	log "$agent: $passed passed, $failed failed in ${secs}s (e2e_node.test exited $rc; $dir)"
	if ((passed + failed == 0)); then
		warn "$agent: no spec ran: does --focus '$FOCUS' select any (see $E2E_BIN/spec-names.txt)?"
	elif ((failed > 0)); then
		head -n 40 "$dir/failed.txt" | sed 's/^/    failed: /'
		log "$agent: why: $dir/e2e.log (the suite, spec by spec) and $dir/kubelet.log (the agent)"
	fi
}

CURRENT_AGENT=""
RUN_PID=""
run_agent() {
	local agent="$1" dir="$OUT/$1" work="$WORK/$1" bin_dir agent_bin rc=0 start=$SECONDS
	mkdir -p "$dir" "$work"
	case "$agent" in
	upstream)
		bin_dir="$("$KUBELET_RS_ROOT/hack/cluster/build.sh" --print)"
		agent_bin="$bin_dir/kubelet"
		;;
	kubelet-rs)
		# The suite runs <dir>/kubelet; exec keeps the pid it health-checks and stops.
		bin_dir="$WORK/kubelet-rs-bin"
		agent_bin="$KUBELET_RS_BIN"
		mkdir -p "$bin_dir"
		printf '#!/bin/sh\nexec %q "$@"\n' "$KUBELET_RS_BIN" >"$bin_dir/kubelet"
		chmod 0755 "$bin_dir/kubelet"
		;;
	esac
	[[ -x "$agent_bin" ]] || die "no $agent binary at $agent_bin"
	snapshot_state "$work"
	local suite_args=(--k8s-bin-dir "$bin_dir" --node-name "$NODE_NAME" --prepull-images=false
		--container-runtime-endpoint "unix://$CONTAINERD_SOCKET"
		--kubelet-config-file "$WORK/base-kubelet-config.yaml" --report-dir "$dir")
	local cmd skip_args=()
	if ((PROCS > 1)); then
		# The ginkgo CLI runs a compiled suite in the suite's directory: a link here keeps the
		# files the suite writes to its working directory (kubeconfig, known_tokens.csv,
		# kubelet-config, static-pods*) in this agent's work dir.
		ln -sf "$E2E_BIN/e2e_node.test" "$work/e2e_node.test"
		[[ -z "$SKIP" ]] || skip_args=(--skip="$SKIP")
		cmd=("$E2E_BIN/ginkgo" --procs="$PROCS" --focus="$FOCUS" "${skip_args[@]}"
			--json-report=report.json --output-dir="$dir" --timeout="$SUITE_TIMEOUT" --no-color -v
			./e2e_node.test -- "${suite_args[@]}")
	else
		[[ -z "$SKIP" ]] || skip_args=(--ginkgo.skip="$SKIP")
		cmd=("$E2E_BIN/e2e_node.test" "${suite_args[@]}" --ginkgo.focus="$FOCUS" "${skip_args[@]}"
			--ginkgo.json-report="$dir/report.json" --ginkgo.timeout="$SUITE_TIMEOUT"
			--ginkgo.no-color --ginkgo.v)
	fi
	log "$agent: running the suite ($PROCS process(es)); log: $dir/e2e.log, agent log: $dir/kubelet.log"
	CURRENT_AGENT="$agent"
	# In the background, so that an interrupt of this script can stop it (timeout runs it in a
	# process group of its own, out of reach of the terminal's SIGINT). An empty SKIP would
	# skip everything: it is left out above. KUBE_TEST_REPO_LIST would rename the images.
	(
		cd "$work"
		unset KUBE_TEST_REPO_LIST
		export PATH="$RUN_PATH"
		exec timeout --kill-after=60s "$((${SUITE_TIMEOUT%h} * 3600 + 1800))" "${cmd[@]}"
	) >"$dir/e2e.log" 2>&1 &
	RUN_PID=$!
	wait "$RUN_PID" || rc=$?
	RUN_PID=""
	cp "$work/kubelet-config" "$dir/kubelet-config.yaml" 2>/dev/null || true
	cleanup_agent "$agent" "$work" "$agent_bin"
	CURRENT_AGENT=""
	summarize "$agent" "$rc" $((SECONDS - start))
}

compare() {
	local d="$OUT/diff.txt" up="$OUT/upstream/passed.txt" krs="$OUT/kubelet-rs/passed.txt"
	: >"$d"
	if [[ -n "${RAN[upstream]:-}" && -n "${RAN[kubelet-rs]:-}" ]]; then
		{
			echo "# passed on upstream, not on kubelet-rs ($(LC_ALL=C comm -23 "$up" "$krs" | wc -l))"
			LC_ALL=C comm -23 "$up" "$krs"
			echo
			echo "# passed on kubelet-rs, not on upstream ($(LC_ALL=C comm -13 "$up" "$krs" | wc -l))"
			LC_ALL=C comm -13 "$up" "$krs"
		} >>"$d"
		log "passed: upstream $(wc -l <"$up"), kubelet-rs $(wc -l <"$krs"); $(LC_ALL=C comm -23 "$up" "$krs" | wc -l) only on upstream ($d)"
	fi
	if ((FAST)) && [[ -n "${RAN[kubelet-rs]:-}" ]]; then
		local re missing=()
		while read -r re; do
			grep -qE -- "$re" "$krs" || missing+=("$re")
		done < <(fast_regexes)
		FAST_MISSING=${#missing[@]}
		{
			echo "# $FAST_LIST: lines with no passed spec on kubelet-rs (${#missing[@]})"
			((${#missing[@]} == 0)) || printf '%s\n' "${missing[@]}"
		} >>"$d"
		if ((${#missing[@]} > 0)); then
			warn "fast subset: ${#missing[@]} line(s) of $FAST_LIST did not pass on kubelet-rs:"
			printf '    %s\n' "${missing[@]}" >&2
		fi
	fi
}

on_exit() {
	local rc=$?
	if [[ -n "$RUN_PID" ]] && pid_alive "$RUN_PID"; then
		# timeout hands SIGTERM to the suite, which stops its services and the kubelet.
		warn "stopping the suite (pid $RUN_PID)"
		kill -TERM "$RUN_PID" 2>/dev/null || true
		wait_gone "$RUN_PID" 120 || kill -KILL -- "-$RUN_PID" 2>/dev/null || true
	fi
	if [[ -n "$CURRENT_AGENT" ]]; then
		cleanup_agent "$CURRENT_AGENT" "$WORK/$CURRENT_AGENT" "${CURRENT_AGENT_BIN:-}" || true
	fi
	# The apiserver's service-account key, written to /tmp and removed once it started: one
	# that outlived an interrupted start.
	if [[ -n "$WORK" && -e "$WORK/.started" ]]; then
		find /tmp -maxdepth 1 -name 'insecure_test_key*' -newer "$WORK/.started" -delete 2>/dev/null || true
	fi
	oci_cleanup
	exit "$rc"
}

main() {
	parse_args "$@"
	if ((BUILD_E2E)); then
		require_cmd flock
		k8s_ensure_go e2e_node.test
		build_e2e
		return 0
	fi
	require_root
	require_cmd jq ctr ss gcc tar gzip sha256sum flock timeout "$BUSYBOX_BIN"
	require_containerd
	k8s_ensure_go e2e_node.test
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/kubelet-rs-conformance.XXXXXX")"
	touch "$WORK/.started"
	trap on_exit EXIT
	trap 'exit 130' INT TERM

	build_e2e
	((FAST == 0)) || check_fast_list
	if [[ " ${AGENTS[*]} " == *" upstream "* ]] || ((BUILD_ONLY)); then
		# The upstream kubelet, with the control plane it is built with (cached after once).
		"$KUBELET_RS_ROOT/hack/cluster/build.sh" --kubelet || die "hack/cluster/build.sh --kubelet failed"
	fi
	resolve_kubelet_rs_bin
	build_images
	if ((BUILD_ONLY)); then
		log "built: $E2E_BIN ($(printf '%s ' "${E2E_TOOLS[@]}")), images in $IMAGE_CACHE/e2e-*.oci.tar"
		return 0
	fi

	check_free
	prepare_host
	mkdir -p "$OUT"
	((OUT_DEFAULT == 0)) || ln -sfn "$OUT" "$(dirname "$OUT")/latest"
	log "focus: $FOCUS"
	log "skip: ${SKIP:-(none)}"
	local agent
	for agent in "${AGENTS[@]}"; do
		if [[ "$agent" == kubelet-rs ]]; then CURRENT_AGENT_BIN="$KUBELET_RS_BIN"; else CURRENT_AGENT_BIN="$("$KUBELET_RS_ROOT/hack/cluster/build.sh" --print)/kubelet"; fi
		run_agent "$agent"
	done
	compare

	# The verdict: kubelet-rs when it ran, the upstream kubelet when it ran alone.
	local judged="${AGENTS[-1]}" failed upstream_failed="${FAILED[upstream]:-0}"
	if ((HARNESS_ERROR)); then
		warn "harness error: see the warnings above; results in $OUT"
		exit 2
	fi
	failed="${FAILED[$judged]:-0}"
	if [[ "$judged" == kubelet-rs ]] && ((upstream_failed > 0)); then
		warn "upstream: $upstream_failed spec(s) failed with the reference kubelet too (environment limits?): $OUT/upstream/failed.txt"
	fi
	if ((failed > 0 || FAST_MISSING > 0)); then
		warn "$judged: $failed spec(s) failed, $FAST_MISSING line(s) of the fast list not passed; results in $OUT"
		exit 1
	fi
	log "$judged: every selected spec passed; results in $OUT"
}

main "$@"
