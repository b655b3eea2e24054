# Shared by the benchmarks in hack/bench: a fresh release agent in a namespace of its own,
# reading an empty manifest folder, and its clean-up. Source it after hack/lib.sh.
# shellcheck shell=bash

NS=krs-bench
PORT="${BENCH_PORT:-10299}"
NODE=bench
BIN="$PWD/target/release/kubelet-rs"
WORK="$(mktemp -d /tmp/kubelet-rs-bench.XXXXXX)"
AGENT_PID=""

KUBELET_RS_NAMESPACE=$NS
prepare_bench() {
	cargo build --release --quiet
	for img in pause busybox; do
		ctr_ns images import --snapshotter overlayfs "$KUBELET_RS_CACHE/images/$img.oci.tar" >/dev/null
	done
}

now_ms() { date +%s%3N; }

running_count() {
	# /pods is compact JSON; one container per pod, so count running container states.
	curl -s "http://127.0.0.1:$PORT/pods" | grep -o '"running":{"startedAt"' | wc -l
}

start_agent() {
	rm -rf "$WORK/manifests" "$WORK/root"
	mkdir -p "$WORK/manifests"
	start_agent_keep
}

# Starts the agent on the existing manifest folder and root dir (an agent restart).
# EXTRA_AGENT_ARGS adds flags.
start_agent_keep() {
	# shellcheck disable=SC2086
	"$BIN" ${EXTRA_AGENT_ARGS:-} --pod-manifest-path="$WORK/manifests" --root-dir="$WORK/root" \
		--containerd-namespace=$NS --hostname-override=$NODE \
		--read-only-port="$PORT" --port="$((PORT + 1))" --healthz-port=0 >>"$WORK/agent.log" 2>&1 &
	AGENT_PID=$!
	until curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null; do sleep 0.05; done
}

stop_pods_and_agent() {
	rm -f "$WORK/manifests"/*.yaml
	local deadline=$((SECONDS + 120))
	while [[ -n "$(ctr_ns containers ls -q)" ]]; do
		((SECONDS < deadline)) || die "pods were not cleaned up; see $WORK/agent.log"
		sleep 0.2
	done
	kill "$AGENT_PID" && wait "$AGENT_PID" || true
}

cleanup() {
	[[ -n "$AGENT_PID" ]] && kill "$AGENT_PID" 2>/dev/null || true
}
trap cleanup EXIT

# CPU seconds (user+system) a process has used so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
