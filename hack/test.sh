#!/usr/bin/env bash
# Runs every check and test on a real node: node set-up and test images first (integration
# tests need containerd, runc, CNI and the images), a fixed subset of upstream's node
# conformance specs, then formatting, clippy, unit, integration and doc tests.
#
# From cold caches most of the time is building: the Go programs the tests run beside the agent
# (the control plane, the node e2e suite, the CSI helpers, Prometheus) and the Rust crate. The Go
# builds go on in the background (go-builds, its log in target/go-builds.log) while cargo
# builds, as neither keeps both cores busy all the time (module downloads, links, the crate's
# own single codegen); the steps that need the Go binaries wait for them. The test binaries then
# run several at a time (hack/run-tests.sh). Every step's time is printed at the end, also when
# a step fails.
# KUBELET_RS_TEST_THREADS and KUBELET_RS_TEST_LANES override the test parallelism.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

timings=()
declare -A BG_PID=() BG_START=()
step() {
	local name="$1" start=$SECONDS
	shift
	log "==> $name"
	"$@" || {
		timings+=("$(printf '%-16s %5ss  FAILED' "$name" $((SECONDS - start)))")
		die "step '$name' failed after $((SECONDS - start))s: $*"
	}
	timings+=("$(printf '%-16s %5ss' "$name" $((SECONDS - start)))")
}

print_timings() {
	local rc=$?
	((${#timings[@]} == 0)) || {
		log "step times (${SECONDS}s in all$( ((rc == 0)) || echo ", exit $rc")):"
		printf '    %s\n' "${timings[@]}"
	}
	local name
	for name in "${!BG_PID[@]}"; do
		kill -- "-${BG_PID[$name]}" 2>/dev/null || kill "${BG_PID[$name]}" 2>/dev/null || true
	done
	[[ -z "${GO_BUILDS_PID:-}" ]] || ! pid_alive "$GO_BUILDS_PID" || {
		log "stopping the background Go builds"
		kill -- "-$GO_BUILDS_PID" 2>/dev/null || kill "$GO_BUILDS_PID" 2>/dev/null || true
	}
	[[ -z "${CLUSTER_DIR:-}" || "${CLUSTER_STARTED:-0}" == 0 ]] ||
		hack/cluster/down.sh --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true
	[[ -z "${GO_STATE:-}" ]] || rm -rf "$GO_STATE"
}
trap print_timings EXIT

require_root
require_cargo
cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1 ||
	die "rustfmt and clippy are needed: rustup component add rustfmt clippy"
cd "$KUBELET_RS_ROOT"

export RUST_BACKTRACE=1
# A clean clone builds everything once: incremental compilation's bookkeeping would only cost.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
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
# The Go programs, built once per version and cached under $KUBELET_RS_CACHE (from cold caches
# about 25 minutes of both cores, then nothing), in the background while cargo builds; a
# missing Go toolchain or a failed build fails the run. In order: the control plane (the cluster
# tests join a real one; with metrics-server), the node e2e suite (the conformance step), the
# CSI test's driver, registrar and upstream's external-attacher (hack/csi), Prometheus 3.16.0
# and kube-state-metrics for the Prometheus test. Each part's time is in the log.
CLUSTER_DIR="${KUBELET_RS_CLUSTER_DIR:-/var/lib/kubelet-rs-cluster}"
GO_LOG="$KUBELET_RS_ROOT/target/go-builds.log"
GO_STATE="$(mktemp -d)"
mkdir -p "$(dirname "$GO_LOG")"
go_part() {
	local name="$1" start=$SECONDS
	shift
	echo "==> $name"
	"$@" || { echo "go-builds: $name failed after $((SECONDS - start))s: $*" >"$GO_STATE/failed"; return 1; }
	echo "go-builds: $name $((SECONDS - start))s" | tee -a "$GO_STATE/times"
	touch "$GO_STATE/$name.done"
}
go_builds() {
	go_part k8s hack/cluster/build.sh &&
		go_part e2e hack/conformance.sh --build-e2e &&
		go_part csi hack/csi/build.sh &&
		go_part prometheus hack/prometheus/build.sh
}
# wait_go PART: until the background builds finished PART (and what came before it).
wait_go() {
	until [[ -e "$GO_STATE/$1.done" ]]; do
		if [[ -e "$GO_STATE/failed" ]] || ! pid_alive "$GO_BUILDS_PID"; then
			[[ -e "$GO_STATE/$1.done" ]] && break
			cat "$GO_LOG" >&2
			warn "$(cat "$GO_STATE/failed" 2>/dev/null || echo "the background Go builds ended before $1")"
			return 1
		fi
		sleep 2
	done
	grep -h '^go-builds: ' "$GO_STATE/times" | sed 's/^/    /'
}
set -m # its own process group, so an early exit stops all of it
# However the builds end short of the last part (a failed part, a failed tee), the state says
# so, and whoever waits on a part stops waiting.
{
	go_builds || [[ -e "$GO_STATE/failed" ]] ||
		echo "go-builds: ended early (see $GO_LOG)" >"$GO_STATE/failed"
} >"$GO_LOG" 2>&1 &
GO_BUILDS_PID=$!
set +m
log "Go builds started in the background (log: $GO_LOG)"

# bg_start NAME COMMAND...: a step run in the background, its output in target/NAME.log;
# bg_wait NAME ends it as a step (its time is the job's own, its output printed if it failed).
bg_start() {
	local name="$1"
	shift
	log "==> $name (in the background; log: target/$name.log)"
	BG_START[$name]="$(date +%s)"
	rm -f "target/$name.end"
	set -m # its own process group: stopping it stops cargo's children too
	{
		bg_rc=0
		"$@" || bg_rc=$?
		date +%s >"target/$name.end"
		exit "$bg_rc"
	} >"target/$name.log" 2>&1 &
	BG_PID[$name]=$!
	set +m
}
bg_wait() {
	local name="$1" rc=0 took
	wait "${BG_PID[$name]}" || rc=$?
	unset "BG_PID[$name]"
	# The job's own time, not how long the run took to come back for it.
	took=$(($(cat "target/$name.end" 2>/dev/null || date +%s) - BG_START[$name]))
	if ((rc != 0)); then
		cat "target/$name.log" >&2
		timings+=("$(printf '%-16s %5ss  FAILED (background)' "$name" "$took")")
		die "step '$name' failed after ${took}s (its output above, and in target/$name.log)"
	fi
	timings+=("$(printf '%-16s %5ss  (background)' "$name" "$took")")
	log "$name passed after ${took}s"
}

step fmt cargo fmt --all -- --check
# The debug build the conformance step and the integration tests run, and every test binary
# (built on it). Clippy's check then goes on in the background during the conformance step,
# which mostly waits on pods.
step agent-build cargo build --bin kubelet-rs
step test-build cargo test --all-targets --no-run
bg_start clippy cargo clippy --all-targets -- -D warnings
step wait-go-e2e wait_go e2e
# After the control plane's build: the metrics-server image packs the binary it builds. The
# agent just built imports the images (without KUBELET_RS_BIN the script would run `cargo
# build`, which waits for the build lock clippy holds).
step build-images env KUBELET_RS_BIN="$KUBELET_RS_ROOT/target/debug/kubelet-rs" hack/build-images.sh
# Upstream's node conformance suite (e2e_node.test), the specs of hack/conformance-fast.txt,
# against the debug build the integration tests run too. Before cluster-up: the suite starts its
# own apiserver on 127.0.0.1:6443. The CSI and Prometheus builds go on meanwhile (the suite
# mostly waits on pods).
CONFORMANCE_OUT=/var/lib/kubelet-rs-conformance/test-sh
rm -rf "$CONFORMANCE_OUT"
step conformance hack/conformance.sh --fast --agent kubelet-rs \
	--kubelet-rs-bin target/debug/kubelet-rs --out "$CONFORMANCE_OUT"
# Before the tests: they take cargo's build lock (to list the test binaries), which clippy holds.
bg_wait clippy
# The doc tests (none today) before the rest: the run's last libtest line is then the sum of
# every test that ran, not a doc-test count of zero.
step doc-tests cargo test --doc
CLUSTER_STARTED=1
step cluster-up hack/cluster/up.sh --dir "$CLUSTER_DIR"
export KUBELET_RS_CLUSTER_DIR="$CLUSTER_DIR"
# Tests that need root and containerd are #[ignore]d, so a plain `cargo test` counts them as
# ignored; here they run too (--include-ignored), and KUBELET_RS_INTEGRATION=1 is the consent
# they ask for. Once run, a missing containerd or image is a failure, never a skip. Each test
# removes the cgroups its containers left, and fails if one stays.
# The binaries that run the CSI helpers or Prometheus wait for their builds (--go-state); the
# rest start at once, so those builds go on while the tests mostly wait on pods.
step tests env KUBELET_RS_INTEGRATION=1 hack/run-tests.sh --go-state "$GO_STATE" \
	--go-pid "$GO_BUILDS_PID"
step wait-go-all wait_go prometheus

log "all passed in ${SECONDS}s"
if ((quick_start_stopped)); then
	log "the quick start was stopped for the tests; start it again with: hack/local-up.sh --background"
fi
