#!/usr/bin/env bash
# Pod start latency and agent cost, on this node, with the release build.
#
# For N in 1, 10, 30 (repeated RUNS times): a fresh agent watches an empty manifest folder;
# the clock starts when N one-container busybox manifests are written and stops when /pods
# reports all N containers running. Then, with 30 pods up, the agent's CPU seconds over
# IDLE_SECONDS of idling and its peak RSS (VmHWM) are read from /proc.
#
# Usage: hack/bench/startup.sh   (needs root, containerd and the test images: hack/setup-node.sh
# and hack/build-images.sh). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source hack/lib.sh
require_root

RUNS="${RUNS:-3}"
IDLE_SECONDS="${IDLE_SECONDS:-60}"
SIZES="${SIZES:-1 10 30}"
# shellcheck source=lib.sh
source hack/bench/lib.sh
prepare_bench

write_pods() {
	local n=$1 i
	for ((i = 0; i < n; i++)); do
		cat >"$WORK/manifests/.p$i.tmp" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: bench-$i
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: docker.io/library/busybox:1.36
    command: ["sleep", "36000"]
YAML
		mv "$WORK/manifests/.p$i.tmp" "$WORK/manifests/p$i.yaml"
	done
}

declare -A RESULTS
for n in $SIZES; do
	times=()
	for ((r = 0; r < RUNS; r++)); do
		start_agent
		t0=$(now_ms)
		write_pods "$n"
		until [[ "$(running_count)" -ge "$n" ]]; do sleep 0.02; done
		t1=$(now_ms)
		times+=($((t1 - t0)))
		if [[ "$n" == 30 && "$r" == 0 ]]; then
			sleep 5
			c0=$(cpu_seconds "$AGENT_PID")
			sleep "$IDLE_SECONDS"
			c1=$(cpu_seconds "$AGENT_PID")
			IDLE_CPU=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.2f", b - a}')
			PEAK_RSS_KB=$(awk '/VmHWM/ {print $2}' "/proc/$AGENT_PID/status")
			RSS_KB=$(awk '/VmRSS/ {print $2}' "/proc/$AGENT_PID/status")
			LOGGERS_KB=$(ps -eo rss,args | awk '/kubelet-rs-cri-logger/ && !/awk/ {s += $1; n++} END {printf "%d %d", s, n}')
		fi
		stop_pods_and_agent
	done
	RESULTS[$n]="$(printf '%s\n' "${times[@]}" | median) (runs: ${times[*]})"
done

echo
echo "| pods | manifests written → all Running (median ms) |"
echo "|---|---|"
for n in $SIZES; do echo "| $n | ${RESULTS[$n]} |"; done
if [[ -n "${IDLE_CPU:-}" ]]; then
	echo
	echo "| with 30 pods | value |"
	echo "|---|---|"
	echo "| agent CPU over ${IDLE_SECONDS}s idle | ${IDLE_CPU} s |"
	echo "| agent peak RSS (VmHWM) | $((PEAK_RSS_KB / 1024)) MiB ($PEAK_RSS_KB KiB) |"
	echo "| agent RSS at the end of idle | $((RSS_KB / 1024)) MiB |"
	read -r lkb ln <<<"$LOGGERS_KB"
	echo "| log writer processes (one per container, run by the shims) | $ln, $((lkb / 1024)) MiB RSS in all |"
fi
[[ -n "${KEEP_WORK:-}" ]] && echo "kept $WORK" || rm -rf "$WORK"
