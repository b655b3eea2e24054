#!/usr/bin/env bash
# Stops the control plane hack/cluster/up.sh started in --dir (default /var/lib/kubelet-rs-cluster):
# SIGTERM to each component in reverse start order, SIGKILL after 10 s.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

DIR=/var/lib/kubelet-rs-cluster
[[ "${1:-}" == --dir ]] && DIR="$2"

for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do
	pidfile="$DIR/run/$name.pid"
	pid="$(cat "$pidfile" 2>/dev/null)" || continue
	rm -f "$pidfile"
	kill -0 "$pid" 2>/dev/null || continue
	kill "$pid"
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		warn "$name (pid $pid) ignored SIGTERM for 10s; killing it"
		kill -9 "$pid" 2>/dev/null || true
	fi
	log "stopped $name"
done
