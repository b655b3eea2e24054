#!/usr/bin/env bash
# Runs every test binary of the crate (unit tests, integration tests, benches in test mode), the
# integration ones included (--include-ignored; KUBELET_RS_INTEGRATION=1 is set by the caller,
# hack/test.sh), several binaries at a time.
#
#   hack/run-tests.sh [--lanes N] [--threads T] [--only NAME[,NAME...]] [--log-dir DIR]
#                     [--go-state DIR [--go-pid PID]]
#
#   --lanes N     test binaries run at once (default 3; KUBELET_RS_TEST_LANES)
#   --threads T   tests at once inside each binary (default: nproc, at most 4;
#                 KUBELET_RS_TEST_THREADS)
#   --only LIST   run only these binaries (names as cargo gives them: pods, cluster_csi, ...)
#   --log-dir DIR each binary's output (default target/test-logs)
#   --go-state DIR  the Go programs are still being built (hack/test.sh's background builds):
#                 a binary that runs one of them (NEEDS below) starts once DIR/<part>.done
#                 exists, and fails, naming the build, if DIR/failed appears first (or the
#                 builds' process, --go-pid, is gone without the part done); the CPU group
#                 (below) waits for all of them, as the builds keep both cores busy
#
# Why not `cargo test`: it runs the binaries one after another, and most integration binaries
# hold one to three tests that spend their time waiting on pods and the control plane, so a
# 2-core machine sat mostly idle for half an hour. Why not cargo-nextest: it runs each test in
# a process of its own, and these tests share per-process state on purpose (ports handed out
# once per process, images imported once, locks between tests of one binary). So this runs
# whole binaries side by side, each exactly as `cargo test` would run it (same arguments, the
# package root as working directory), and keeps apart what cannot overlap:
# - EXCLUSIVE binaries run with no other binary beside them (they restart containerd, or take
#   host-wide state for their own: every network namespace, the host's hostPort chains);
# - binaries of one CONFLICT group never overlap each other (the CPU-heavy and the
#   CPU-sensitive ones).
# Longest first (the durations of the last run are kept in $KUBELET_RS_CACHE/test-durations),
# so the long cluster binaries do not end up alone at the end. Every binary runs even when an
# earlier one failed; the exit status is 1 when any failed, and each failure's whole output is
# printed. A table of every binary's time ends the run.
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

default_threads="$(nproc)"
((default_threads <= 4)) || default_threads=4
LANES="${KUBELET_RS_TEST_LANES:-3}"
THREADS="${KUBELET_RS_TEST_THREADS:-$default_threads}"
ONLY=""
GO_STATE=""
GO_PID=""
LOG_DIR="$KUBELET_RS_ROOT/target/test-logs"
while (($# > 0)); do
	case "$1" in
	--lanes) LANES="$2"; shift ;;
	--threads) THREADS="$2"; shift ;;
	--only) ONLY=",$2,"; shift ;;
	--log-dir) LOG_DIR="$2"; shift ;;
	--go-state) GO_STATE="$2"; shift ;;
	--go-pid) GO_PID="$2"; shift ;;
	-h | --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
((LANES >= 1 && THREADS >= 1)) || die "--lanes and --threads must be at least 1"

# Binaries that run alone, and why.
declare -A EXCLUSIVE=(
	[containerd_restart]="restarts containerd under every agent on the machine"
	[daemonset]="waits until /run/netns holds no namespace pinned by other tests"
	[network]="takes the host's CNI-HOSTPORT-* chains for its own when none exist and removes them"
)
# Binaries of one group never overlap each other, and why. cpu: the ones that keep cores busy
# (metrics-server and HPA spinners, Prometheus, a busy loop, a second control plane) and the ones
# that measure or time what a busy machine slows (a spinner's share of a core, a probe's window),
# the unit tests among them (a thousand at once, some on real sockets and real clocks).
declare -A CONFLICT=(
	[cluster_metrics]=cpu [cluster_prometheus]=cpu [subpath_race]=cpu [cluster_faults]=cpu
	[stats]=cpu [health]=cpu ["kubelet_rs (lib)"]=cpu
)
# Binaries that run Go programs built by hack/test.sh's background builds, and the part they
# wait for (hack/csi/build.sh's driver, registrar and attacher; hack/prometheus/build.sh's
# Prometheus and kube-state-metrics). The control plane's part is done before any test starts.
declare -A NEEDS=(
	[cluster_block]=csi [cluster_csi]=csi [cluster_csi_provisioning]=csi
	[cluster_prometheus]=prometheus
)

require_cmd jq flock
cd "$KUBELET_RS_ROOT"
mkdir -p "$LOG_DIR" "$KUBELET_RS_CACHE"
DURATIONS="$KUBELET_RS_CACHE/test-durations"

# The test executables, from cargo's own build report (already built by hack/test.sh's
# test-build step, so this only links what changed): name<TAB>kind<TAB>path.
artifacts="$(cargo test --all-targets --no-run --message-format=json-render-diagnostics |
	jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null)
		| [.target.name, (.target.kind | join(",")), .executable] | @tsv')" ||
	die "cargo test --no-run failed"
declare -A EXE=()
names=()
while IFS=$'\t' read -r name kind exe; do
	[[ -n "$name" ]] || continue
	# The library's and the binary's unit tests share the crate's name.
	[[ "$kind" == test ]] || name="$name ($kind)"
	if [[ -n "$ONLY" && "$ONLY" != *",${name%% (*},"* ]]; then continue; fi
	EXE[$name]="$exe"
	names+=("$name")
done <<<"$artifacts"
((${#names[@]} > 0)) || die "no test binary to run${ONLY:+ (--only ${ONLY//,/ })}"

# Longest first by the last recorded time; a binary never timed goes first (the cluster ones
# before the rest: they are the long ones), as starting a long one late leaves it alone at the end.
declare -A LAST=()
if [[ -f "$DURATIONS" ]]; then
	while IFS=$'\t' read -r secs name; do LAST[$name]="$secs"; done <"$DURATIONS"
fi
mapfile -t order < <(for n in "${names[@]}"; do
	unknown=99998
	[[ "$n" != cluster* ]] || unknown=99999
	printf '%s\t%s\n' "${LAST[$n]:-$unknown}" "$n"
done |
	sort -t$'\t' -k1,1nr -k2,2 | cut -f2)

declare -A PID_OF=() START=() SECS=() STATUS=()
running=() # names
# Groups busy right now, and whether an exclusive binary holds the machine.
declare -A GROUP_BUSY=()

log_file() { printf '%s/%s.log' "$LOG_DIR" "${1// /_}"; }

launch() {
	local name="$1" log
	log="$(log_file "$name")"
	START[$name]=$SECONDS
	# As cargo runs a test binary: the package root as working directory.
	(
		exec "${EXE[$name]}" --include-ignored --test-threads="$THREADS"
	) >"$log" 2>&1 &
	PID_OF[$name]=$!
	running+=("$name")
	[[ -z "${CONFLICT[$name]:-}" ]] || GROUP_BUSY[${CONFLICT[$name]}]=1
	log "start $name (${#running[@]} running)"
}

# Records NAME, which ended with status RC, and prints its result (its whole output if it failed).
finish() {
	local name="$1" rc="$2" i summary
	for i in "${!running[@]}"; do
		[[ "${running[$i]}" == "$name" ]] && unset 'running[i]'
	done
	running=("${running[@]}")
	SECS[$name]=$((SECONDS - ${START[$name]:-$SECONDS}))
	STATUS[$name]=$rc
	# A binary that never started held no group.
	[[ -z "${CONFLICT[$name]:-}" || -z "${PID_OF[$name]:-}" ]] || unset "GROUP_BUSY[${CONFLICT[$name]}]"
	summary="$(grep -E '^test result:' "$(log_file "$name")" 2>/dev/null | tail -n 1 || true)"
	if ((rc == 0)); then
		log "ok   $name in ${SECS[$name]}s: ${summary#test result: }"
	else
		log "FAIL $name in ${SECS[$name]}s (exit $rc): ${summary#test result: }"
		printf '%s\n' "----- output of $name ($(log_file "$name")) -----"
		cat "$(log_file "$name")"
		printf '%s\n' "----- end of $name -----"
	fi
}

# Waits (a second at most) and records the binaries that ended meanwhile. Polling, not
# `wait -n`: a binary may also be waiting for a Go build to finish, which no wait reports.
reap() {
	local name rc ended=0
	for name in "${running[@]}"; do
		pid_alive "${PID_OF[$name]}" && continue
		rc=0
		wait "${PID_OF[$name]}" || rc=$?
		finish "$name" "$rc"
		ended=1
	done
	((ended)) || sleep 1
}

# Whether the Go build NAME needs is done; fails NAME (and says why) when that build failed.
# The CPU group waits for the last build (prometheus): until then the builds hold both cores.
needs_met() {
	local name="$1" part="${NEEDS[$1]:-}" why=""
	[[ -n "$part" || "${CONFLICT[$name]:-}" != cpu ]] || part=prometheus
	[[ -z "$part" || -z "$GO_STATE" || -e "$GO_STATE/$part.done" ]] && return 0
	if [[ -e "$GO_STATE/failed" ]]; then
		why="$(cat "$GO_STATE/failed")"
	elif [[ -n "$GO_PID" ]] && ! pid_alive "$GO_PID"; then
		# Gone: the part may have been marked done just before.
		[[ -e "$GO_STATE/$part.done" ]] && return 0
		why="the builds' process $GO_PID is gone"
	else
		return 1
	fi
	echo "not run: it needs the Go build '$part', which did not finish: $why" >"$(log_file "$name")"
	finish "$name" 1
	return 2
}

# Whether NAME may start now (1: not yet; 2: never, it was failed).
may_start() {
	local name="$1" met=0
	((${#running[@]} < LANES)) || return 1
	needs_met "$name" || met=$?
	((met == 0)) || return "$met"
	if [[ -n "${EXCLUSIVE[$name]:-}" ]]; then
		((${#running[@]} == 0))
		return
	fi
	local r
	for r in "${running[@]}"; do
		[[ -z "${EXCLUSIVE[$r]:-}" ]] || return 1
	done
	[[ -z "${CONFLICT[$name]:-}" || -z "${GROUP_BUSY[${CONFLICT[$name]}]:-}" ]]
}

# Interrupted or failed here: the binaries still running are stopped with it.
stop_running() {
	local n
	for n in "${running[@]}"; do kill "${PID_OF[$n]}" 2>/dev/null || true; done
}
trap stop_running EXIT

# The exclusive binaries first, one by one, while nothing else runs; then the rest.
queue=()
for n in "${order[@]}"; do [[ -n "${EXCLUSIVE[$n]:-}" ]] && queue+=("$n"); done
for n in "${order[@]}"; do [[ -z "${EXCLUSIVE[$n]:-}" ]] && queue+=("$n"); done
log "${#queue[@]} test binaries, $LANES at a time, $THREADS test threads each; logs in $LOG_DIR"
started=$SECONDS
while ((${#queue[@]} > 0)); do
	launched=0
	for i in "${!queue[@]}"; do
		verdict=0
		may_start "${queue[$i]}" || verdict=$?
		((verdict != 1)) || continue
		((verdict == 2)) || launch "${queue[$i]}"
		unset 'queue[i]'
		queue=("${queue[@]}")
		launched=1
		break
	done
	((launched)) || reap
done
while ((${#running[@]} > 0)); do reap; done

# The times, for the next run's order (kept for binaries this run left out) and for the log.
failed=()
{
	for n in "${names[@]}"; do printf '%s\t%s\n' "${SECS[$n]}" "$n"; done
	for n in "${!LAST[@]}"; do [[ -n "${EXE[$n]:-}" ]] || printf '%s\t%s\n' "${LAST[$n]}" "$n"; done
} | sort -t$'\t' -k1,1nr >"$DURATIONS.tmp" && mv "$DURATIONS.tmp" "$DURATIONS"
log "test binaries, longest first (wall time of the step: $((SECONDS - started))s):"
for n in "${names[@]}"; do printf '%s\t%s\n' "${SECS[$n]}" "$n"; done | sort -t$'\t' -k1,1nr |
	while IFS=$'\t' read -r secs n; do
		if [[ "${STATUS[$n]}" == 0 ]]; then mark=ok; else mark=FAIL; fi
		printf '    %-4s %5ss  %s\n' "$mark" "$secs" "$n"
	done
for n in "${names[@]}"; do [[ "${STATUS[$n]}" == 0 ]] || failed+=("$n"); done
if ((${#failed[@]} > 0)); then
	die "${#failed[@]} test binar$( ((${#failed[@]} == 1)) && echo y || echo ies) failed: ${failed[*]} (outputs above and in $LOG_DIR)"
fi
# Every binary's own libtest line, then their sum in the same form: the step's output ends with
# the count of tests that ran (each line above is prefixed, so a reader of cargo's format sees
# these).
passed=0 ignored=0 filtered=0
for n in "${names[@]}"; do
	line="$(grep -E '^test result:' "$(log_file "$n")" 2>/dev/null | tail -n 1 || true)"
	[[ -n "$line" ]] || continue
	printf '%s  (%s)\n' "$line" "$n"
	[[ "$line" =~ ([0-9]+)\ passed ]] && passed=$((passed + BASH_REMATCH[1]))
	[[ "$line" =~ ([0-9]+)\ ignored ]] && ignored=$((ignored + BASH_REMATCH[1]))
	[[ "$line" =~ ([0-9]+)\ filtered\ out ]] && filtered=$((filtered + BASH_REMATCH[1]))
done
log "all ${#names[@]} test binaries passed"
printf 'test result: ok. %d passed; 0 failed; %d ignored; 0 measured; %d filtered out (all %d binaries)\n' \
	"$passed" "$ignored" "$filtered" "${#names[@]}"
