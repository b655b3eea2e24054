#!/usr/bin/env bash
# Cost of probing: PODS pods (default 30), each with a liveness (exec), a readiness
# (httpGet) and a startup (tcpSocket) probe at periodSeconds 1. Once all are Ready, the
# agent's CPU seconds over MEASURE_SECONDS (default 60) are read from /proc; containerd's
# and the shims' CPU over the same window are shown too, since exec probes cost them work.
#
# Usage: hack/bench/probes.sh   (root, containerd and the test images). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source hack/lib.sh
require_root

PODS="${PODS:-30}"
MEASURE_SECONDS="${MEASURE_SECONDS:-60}"
# shellcheck source=lib.sh
source hack/bench/lib.sh
prepare_bench

ready_count() {
	curl -s "http://127.0.0.1:$PORT/pods" | grep -o '"ready":true' | wc -l
}

sum_cpu() {
	local total=0 pid
	for pid in "$@"; do
		total=$(awk -v t="$total" -v c="$(cpu_seconds "$pid" 2>/dev/null || echo 0)" 'BEGIN {printf "%.2f", t + c}')
	done
	echo "$total"
}

start_agent
for ((i = 0; i < PODS; i++)); do
	cat >"$WORK/manifests/.p$i.tmp" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: probed-$i
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"]
    ports: [{containerPort: 8080, name: http}]
    livenessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
    readinessProbe: {httpGet: {port: http, path: /index.html}, periodSeconds: 1}
    startupProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
YAML
	mv "$WORK/manifests/.p$i.tmp" "$WORK/manifests/p$i.yaml"
done
deadline=$((SECONDS + 300))
until [[ "$(ready_count)" -ge "$PODS" ]]; do
	((SECONDS < deadline)) || die "pods did not become ready; see $WORK/agent.log"
	sleep 0.5
done
sleep 5
shims=$(pgrep -f containerd-shim-runc-v2 | tr '\n' ' ')
ctrd=$(pgrep -x containerd)
a0=$(cpu_seconds "$AGENT_PID")
# shellcheck disable=SC2086
o0=$(sum_cpu "$ctrd" $shims)
sleep "$MEASURE_SECONDS"
a1=$(cpu_seconds "$AGENT_PID")
# shellcheck disable=SC2086
o1=$(sum_cpu "$ctrd" $shims)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$AGENT_PID/status")
# grep -c prints 0 (and exits 1) when nothing restarted: the good case must not end the script.
restarts=$(curl -s "http://127.0.0.1:$PORT/pods" | grep -o '"restartCount":[1-9]' | grep -c . || true)
stop_pods_and_agent

agent=$(awk -v a="$a0" -v b="$a1" 'BEGIN {printf "%.2f", b - a}')
others=$(awk -v a="$o0" -v b="$o1" 'BEGIN {printf "%.2f", b - a}')
echo
echo "| $PODS pods × 3 probes at periodSeconds 1, over ${MEASURE_SECONDS}s | value |"
echo "|---|---|"
echo "| agent CPU | ${agent} s ($(awk -v c="$agent" -v s="$MEASURE_SECONDS" 'BEGIN {printf "%.1f", 100 * c / s}')% of one core) |"
echo "| containerd + shims CPU (exec probes run through them) | ${others} s |"
echo "| agent peak RSS | $((rss_kb / 1024)) MiB |"
echo "| containers restarted during the window (should be 0) | $restarts |"
