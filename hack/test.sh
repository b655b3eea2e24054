#!/usr/bin/env bash
# Runs every check and test on a real node: node set-up and test images first (integration
# tests need containerd, runc, CNI and the images), a fixed subset of upstream's node
# conformance specs, then formatting, clippy, unit, integration and doc tests.
# KUBELET_RS_TEST_THREADS overrides the test parallelism.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Integration tests start real pods; more than a few at once only makes them slower and
# flakier on small machines.
default_threads="$(nproc)"
((default_threads <= 4)) || default_threads=4
TEST_THREADS="${KUBELET_RS_TEST_THREADS:-$default_threads}"

timings=()
step() {
	local name="$1" start=$SECONDS
	shift
	log "==> $name"
	"$@" || die "step '$name' failed after $((SECONDS - start))s: $*"
	timings+=("$(printf '%-14s %4ss' "$name" $((SECONDS - start)))")
}

require_root
require_cargo
cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1 ||
	die "rustfmt and clippy are needed: rustup component add rustfmt clippy"
cd "$KUBELET_RS_ROOT"

export RUST_BACKTRACE=1
step setup-node hack/setup-node.sh
# The quick start (hack/local-up.sh) holds the ports the conformance step needs (10248, 10250,
# 10255; 6443 with --cluster) and runs its pods in containerd's kubelet-rs namespace, which
# the conformance step wants empty: stop it, pods included, and say so. Another agent or
# other pods there still fail the conformance step's own check, which names them.
QUICK_START_PIDFILE="${KUBELET_RS_PIDFILE:-/run/kubelet-rs.pid}"
QUICK_START_STATE="${KUBELET_RS_LOCAL_UP_STATE:-/run/kubelet-rs-local-up.env}"
quick_start_stopped=0
if [[ -f "$QUICK_START_STATE" ]] ||
	{ pid="$(cat "$QUICK_START_PIDFILE" 2>/dev/null)" && pid_alive "$pid" &&
		[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == kubelet-rs ]]; }; then
	log "the quick start (hack/local-up.sh) is up: stopping its agent and removing its pods for the tests"
	step quick-start-down hack/local-up.sh --down
	quick_start_stopped=1
fi
# The cluster tests join a real control plane: built from the Kubernetes modules once per
# version (about 20 minutes the first time on 2 cores, then cached), started fresh for this run
# and stopped on exit. A missing Go toolchain or a failed build fails the run.
CLUSTER_DIR="${KUBELET_RS_CLUSTER_DIR:-/var/lib/kubelet-rs-cluster}"
step k8s-build hack/cluster/build.sh
# The CSI test's driver, registrar and upstream's external-attacher (hack/csi, cached likewise).
step csi-build hack/csi/build.sh
# Prometheus 3.16.0 (prometheus, promtool) and kube-state-metrics v2.20.0 from their Go modules,
# for the Prometheus test (integration/cluster_prometheus.rs): built once per version (about
# 30 minutes the first time on a busy 2-core machine), then cached under $KUBELET_RS_CACHE.
step prometheus-build hack/prometheus/build.sh
# After k8s-build: the metrics-server image packs the binary that step builds.
step build-images hack/build-images.sh
# Upstream's node conformance suite (e2e_node.test, built once per version beside the control
# plane), the specs of hack/conformance-fast.txt, against the debug build the integration tests
# run too. Before cluster-up: the suite starts its own apiserver on 127.0.0.1:6443.
step agent-build cargo build --bin kubelet-rs
CONFORMANCE_OUT=/var/lib/kubelet-rs-conformance/test-sh
rm -rf "$CONFORMANCE_OUT"
step conformance hack/conformance.sh --fast --agent kubelet-rs \
	--kubelet-rs-bin target/debug/kubelet-rs --out "$CONFORMANCE_OUT"
trap 'hack/cluster/down.sh --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true' EXIT
step cluster-up hack/cluster/up.sh --dir "$CLUSTER_DIR"
export KUBELET_RS_CLUSTER_DIR="$CLUSTER_DIR"
step fmt cargo fmt --all -- --check
step clippy cargo clippy --all-targets -- -D warnings
# Tests that need root and containerd are #[ignore]d, so a plain `cargo test` counts them as
# ignored; here they run too (--include-ignored), and KUBELET_RS_INTEGRATION=1 is the consent
# they ask for. Once run, a missing containerd or image is a failure, never a skip. Each test
# removes the cgroups its containers left, and fails if one stays.
step tests env KUBELET_RS_INTEGRATION=1 cargo test --all-targets -- --include-ignored \
	--test-threads="$TEST_THREADS"
step doc-tests cargo test --doc

log "all passed in ${SECONDS}s:"
printf '    %s\n' "${timings[@]}"
if ((quick_start_stopped)); then
	log "the quick start was stopped for the tests; start it again with: hack/local-up.sh --background"
fi
