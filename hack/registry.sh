#!/usr/bin/env bash
# Runs Debian's docker-registry (distribution 2.8, package docker-registry) on loopback for
# tests and benchmarks: filesystem storage in DIR, plain HTTP on 127.0.0.1:PORT, optionally
# basic auth from an htpasswd file (bcrypt lines, e.g. from `htpasswd -nbB user pass`).
#
#   hack/registry.sh start DIR PORT [HTPASSWD]   start in the background, wait until it answers
#   hack/registry.sh stop DIR                    stop the one started with DIR
#
# kubelet-rs reaches loopback registries over plain HTTP without configuration (HTTPS is
# tried first), as Docker does; ctr needs --plain-http, skopeo --dest-tls-verify=false.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY_BIN="${REGISTRY_BIN:-/usr/bin/docker-registry}"

start() {
	local dir="$1" port="$2" htpasswd="${3:-}"
	[[ -x "$REGISTRY_BIN" ]] || die "$REGISTRY_BIN not found: apt-get install docker-registry"
	require_cmd curl
	mkdir -p "$dir/data"
	dir="$(cd "$dir" && pwd)"
	if [[ -f "$dir/pid" ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
		die "a registry from $dir is already running (pid $(cat "$dir/pid"))"
	fi
	{
		echo "version: 0.1"
		echo "log:"
		echo "  level: warn"
		echo "  accesslog:"
		echo "    disabled: true"
		echo "storage:"
		echo "  filesystem:"
		echo "    rootdirectory: $dir/data"
		echo "  delete:"
		echo "    enabled: true"
		echo "http:"
		echo "  addr: 127.0.0.1:$port"
		echo "  secret: kubelet-rs-test-registry"
		if [[ -n "$htpasswd" ]]; then
			[[ -f "$htpasswd" ]] || die "htpasswd file $htpasswd not found"
			echo "auth:"
			echo "  htpasswd:"
			echo "    realm: kubelet-rs-test"
			echo "    path: $(cd "$(dirname "$htpasswd")" && pwd)/$(basename "$htpasswd")"
		fi
	} >"$dir/config.yml"
	"$REGISTRY_BIN" serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
	echo $! >"$dir/pid"
	local deadline=$((SECONDS + 15)) code
	while :; do
		code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" || true)"
		[[ "$code" == 200 || "$code" == 401 ]] && break
		if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
			die "registry exited: $(tail -n 5 "$dir/registry.log")"
		fi
		((SECONDS < deadline)) || die "registry on 127.0.0.1:$port did not answer; see $dir/registry.log"
		sleep 0.1
	done
	log "registry on 127.0.0.1:$port (pid $(cat "$dir/pid"), storage $dir/data)"
}

stop() {
	local dir="$1" pid
	[[ -f "$dir/pid" ]] || return 0
	pid="$(cat "$dir/pid")"
	kill "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 10))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
	rm -f "$dir/pid"
}

case "${1:-}" in
start)
	[[ $# -ge 3 ]] || die "usage: $0 start DIR PORT [HTPASSWD]"
	start "$2" "$3" "${4:-}"
	;;
stop)
	[[ $# -ge 2 ]] || die "usage: $0 stop DIR"
	stop "$2"
	;;
*) die "usage: $0 start DIR PORT [HTPASSWD] | stop DIR" ;;
esac
