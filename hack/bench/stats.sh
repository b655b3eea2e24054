#!/usr/bin/env bash
# Cost of the stats collector and of /stats/summary, with PODS_LIST pods (default "30 100")
# of one busybox container each.
#
# For each size: /stats/summary latency over REQUESTS requests (p50, p99) on the read-only
# port; then the collector's CPU per housekeeping cycle: the agent's CPU over
# MEASURE_SECONDS with a 1 s housekeeping interval, minus the same with the collector idle
# (a 1 h interval), divided by the number of cycles.
#
# Usage: hack/bench/stats.sh   (root, containerd and the test images). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source hack/lib.sh
require_root

PODS_LIST="${PODS_LIST:-30 100}"
REQUESTS="${REQUESTS:-200}"
# Long enough to hold two of the collector's disk-usage walks (every 60 s).
MEASURE_SECONDS="${MEASURE_SECONDS:-120}"
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
  name: stats-$i
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

wait_running() {
	local n=$1 deadline=$((SECONDS + 600))
	until [[ "$(running_count)" -ge "$n" ]]; do
		((SECONDS < deadline)) || die "pods did not start; see $WORK/agent.log"
		sleep 0.5
	done
}

percentile() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100+0.999); if (i<1) i=1; print a[i]}'; }

rows=()
for n in $PODS_LIST; do
	EXTRA_AGENT_ARGS="--housekeeping-interval=1s" start_agent
	write_pods "$n"
	wait_running "$n"
	sleep 5
	lat=()
	for ((r = 0; r < REQUESTS; r++)); do
		lat+=("$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/stats/summary")")
	done
	bytes=$(curl -s "http://127.0.0.1:$PORT/stats/summary" | wc -c)
	p50=$(printf '%s\n' "${lat[@]}" | percentile 50)
	p99=$(printf '%s\n' "${lat[@]}" | percentile 99)
	c0=$(cpu_seconds "$AGENT_PID")
	sleep "$MEASURE_SECONDS"
	c1=$(cpu_seconds "$AGENT_PID")
	busy=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", b - a}')
	# Same pods, collector idle: restart the agent with a long interval (pods keep running).
	kill "$AGENT_PID" && wait "$AGENT_PID" || true
	EXTRA_AGENT_ARGS="--housekeeping-interval=1h" start_agent_keep
	wait_running "$n"
	sleep 5
	c0=$(cpu_seconds "$AGENT_PID")
	sleep "$MEASURE_SECONDS"
	c1=$(cpu_seconds "$AGENT_PID")
	idle=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", b - a}')
	per_cycle=$(awk -v b="$busy" -v i="$idle" -v s="$MEASURE_SECONDS" 'BEGIN {printf "%.1f", 1000 * (b - i) / s}')
	rows+=("| $n | $(awk -v x="$p50" 'BEGIN {printf "%.1f", x * 1000}') | $(awk -v x="$p99" 'BEGIN {printf "%.1f", x * 1000}') | $bytes | ${per_cycle} |")
	stop_pods_and_agent
done
echo
echo "| pods | /stats/summary p50 (ms) | p99 (ms) | response bytes | collector CPU per cycle (ms) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
