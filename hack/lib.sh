# Shared helpers for the hack/ scripts. Source it; do not run it.
# shellcheck shell=bash

KUBELET_RS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBELET_RS_NAMESPACE="${KUBELET_RS_NAMESPACE:-kubelet-rs}"
KUBELET_RS_CACHE="${KUBELET_RS_CACHE:-/var/cache/kubelet-rs}"
CONTAINERD_SOCKET="${CONTAINERD_SOCKET:-/run/containerd/containerd.sock}"
export KUBELET_RS_ROOT KUBELET_RS_NAMESPACE KUBELET_RS_CACHE CONTAINERD_SOCKET

# rustup installs into ~/.cargo/bin, which a fresh root shell (or sudo) may not have on PATH.
if [[ -d "${CARGO_HOME:-$HOME/.cargo}/bin" && ":$PATH:" != *":${CARGO_HOME:-$HOME/.cargo}/bin:"* ]]; then
	export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

log() { printf '[%s] %s\n' "$(basename "$0")" "$*"; }
warn() { printf '[%s] WARNING: %s\n' "$(basename "$0")" "$*" >&2; }
die() {
	printf '[%s] ERROR: %s\n' "$(basename "$0")" "$*" >&2
	exit 1
}

require_root() {
	[[ "$(id -u)" -eq 0 ]] || die "must run as root (containerd, CNI and /etc need it); try: sudo $0"
}

require_cmd() {
	local cmd
	for cmd in "$@"; do
		command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' not found; run hack/setup-node.sh first"
	done
}

require_cargo() {
	command -v cargo >/dev/null 2>&1 || die "cargo not found. Install Rust with rustup:
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
    . \"\$HOME/.cargo/env\"
then run this script again."
}

# The one ctr invocation every script uses: our namespace, our socket, and a bounded wait, so a
# dead socket is an error after a few seconds rather than a hang.
ctr_ns() {
	ctr --address "$CONTAINERD_SOCKET" --connect-timeout 5s -n "$KUBELET_RS_NAMESPACE" "$@"
}

containerd_answers() {
	ctr --address "$CONTAINERD_SOCKET" --connect-timeout 2s --timeout 5s version >/dev/null 2>&1
}

require_containerd() {
	containerd_answers || die "containerd is not answering on $CONTAINERD_SOCKET; run hack/setup-node.sh first"
}

# Whether PID runs: a zombie (an exited child of this shell, not reaped yet) does not count.
pid_alive() {
	[[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1")" != Z* ]]
}

# wait_gone PID SECONDS: true once PID has exited, false if it still runs after SECONDS.
wait_gone() {
	local pid="$1" i
	for ((i = 0; i < $2 * 10; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
	! pid_alive "$pid"
}

# stop_pid PID [NAME]: SIGTERM, 20 s to leave, then SIGKILL; a child of this shell is reaped.
stop_pid() {
	local pid="$1" name="${2:-pid $1}"
	if pid_alive "$pid"; then
		kill "$pid" 2>/dev/null || true
		if ! wait_gone "$pid" 20; then
			warn "$name ignored SIGTERM for 20 s; killing it"
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	wait "$pid" 2>/dev/null || true
}

# sha256 of stdin, hex only.
sha256_stdin() { sha256sum | cut -d' ' -f1; }
sha256_file() { sha256sum "$1" | cut -d' ' -f1; }

# quiet WHAT COMMAND...: runs COMMAND with its output held back (openssl and `go mod init` talk
# on success); when it fails, dies naming WHAT and the command with everything it printed, so a
# test's panic or CI's log says why and not just that.
quiet() {
	local what="$1" out
	shift
	if ! out="$("$@" 2>&1)"; then
		die "$what failed: $*
$out"
	fi
}

# with_lock FILE COMMAND...: runs COMMAND holding an exclusive flock on FILE (made if missing),
# so scripts run at once by parallel tests take turns on what they share (a CA, /etc/hosts).
# COMMAND runs where its status is checked, so `set -e` does not stop it: it must check each
# of its own steps.
with_lock() {
	local file="$1" fd
	shift
	exec {fd}>>"$file" || die "cannot open the lock file $file"
	flock "$fd" || die "cannot lock $file"
	local rc=0
	"$@" || rc=$?
	exec {fd}>&-
	return "$rc"
}

# Points NAME at 127.0.0.1 in /etc/hosts (a line of its own), so that what reaches a node by
# its name (the apiserver's logs, exec and metrics calls) stays on loopback. Tests add names from
# many processes at once: the check and the append happen under one lock, or two appends (or an
# append and the newline fix) could interleave. A name added here is only seen by a running Go
# program (kube-apiserver) once its resolver re-reads the file, which it does at most every 5 s:
# wait that out (outside the lock), so a test's first call already resolves.
HOSTS_FILE="${KUBELET_RS_HOSTS_FILE:-/etc/hosts}"
HOSTS_LOCK="${KUBELET_RS_HOSTS_LOCK:-/run/kubelet-rs-hosts.lock}"
hosts_has_loopback() {
	grep -qE "^127\.0\.0\.1([[:space:]]+[^[:space:]]+)*[[:space:]]+$1([[:space:]]|\$)" "$HOSTS_FILE"
}
hosts_append_loopback() {
	hosts_has_loopback "$1" && return 0
	# A file whose last line lacks its newline would swallow ours into that line.
	if [[ -s "$HOSTS_FILE" && -n "$(tail -c1 "$HOSTS_FILE")" ]]; then
		echo >>"$HOSTS_FILE" || die "cannot append to $HOSTS_FILE"
	fi
	echo "127.0.0.1 $1" >>"$HOSTS_FILE" || die "cannot append to $HOSTS_FILE"
	HOSTS_ADDED=1
}
hosts_add_loopback() {
	HOSTS_ADDED=0
	with_lock "$HOSTS_LOCK" hosts_append_loopback "$1"
	if ((HOSTS_ADDED)); then sleep "${KUBELET_RS_HOSTS_WAIT:-6}"; fi
}

# The OCI name of this machine's architecture.
oci_arch() {
	case "$(uname -m)" in
	x86_64) echo amd64 ;;
	aarch64) echo arm64 ;;
	armv7l) echo arm ;;
	ppc64le) echo ppc64le ;;
	s390x) echo s390x ;;
	riscv64) echo riscv64 ;;
	*) die "unsupported architecture $(uname -m)" ;;
	esac
}

# JSON string literal for a value that may contain quotes or backslashes.
json_str() {
	local s="$1"
	s="${s//\\/\\\\}"
	s="${s//\"/\\\"}"
	s="${s//$'\t'/\\t}"
	s="${s//$'\n'/\\n}"
	printf '"%s"' "$s"
}

# JSON array of strings from the arguments.
json_str_array() {
	local out="[" sep="" a
	for a in "$@"; do
		out+="$sep$(json_str "$a")"
		sep=","
	done
	printf '%s]' "$out"
}

# Go on PATH, or the toolchain's usual place; WHAT names the build in the error. Modules come
# from the module proxy only: Go's default list ends in `direct`, which for a module the proxy
# does not serve goes to the module's own host, and builds here reach no other address.
ensure_go() {
	local what="$1" proxy
	if ! command -v go >/dev/null 2>&1; then
		[[ -x /usr/local/go/bin/go ]] ||
			die "the Go toolchain is needed to build $what (go not on PATH nor in /usr/local/go/bin)"
		export PATH="/usr/local/go/bin:$PATH"
	fi
	proxy="$(go env GOPROXY)"
	proxy="${proxy%[,|]direct}"
	[[ -z "$proxy" || "$proxy" == direct ]] || export GOPROXY="$proxy"
}
