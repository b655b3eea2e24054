#!/usr/bin/env python3
"""The number work of hack/bench/vs-upstream.sh, which calls it; not meant to be run by hand.

  vs_report.py events --events FILE --namespace NS --containers FILE --t0-us N --teardown-us N
      One run's latencies from containerd's event stream (`ctr events` output): prints CSV
      rows `metric,value`: startup_ms (manifests written -> the last app container's task
      started), one pod_start_ms per pod (-> the pod's last app container started), and
      teardown_ms (manifests removed -> the last task of the run deleted). The containers file
      has one `container-id pod-name` line per app container (from the agent's /pods), so
      sandboxes are told apart the same way for both agents. Standard library only.

  vs_report.py report --csv FILE [--charts DIR]
      The Markdown table (medians over rounds; p50/p99 over every pod of every round; the ratio
      kubelet-rs / upstream) on stdout, and with --charts the PNG charts (needs matplotlib).

Why Python: the event timestamps are Go time strings with nanoseconds and a zone, and the
percentiles and charts are simpler here than in awk; the shell script keeps the measuring.
"""

import argparse
import csv
import json
import math
import statistics
import sys
from collections import defaultdict
from datetime import datetime

AGENTS = ("kubelet-rs", "upstream")

# Workload name -> (label, pods, containers per pod).
WORKLOADS = {
    "pods1": ("1 pod", 1, 1),
    "pods10": ("10 pods", 10, 1),
    "pods30": ("30 pods", 30, 1),
    "pods100": ("100 pods", 100, 1),
    "pods30x3": ("30 pods x 3 containers", 30, 3),
    "probe30": ("30 pods, exec readiness probe every 1 s", 30, 1),
}


def event_time_us(date, clock, zone):
    """Go's time.String() form, e.g. `2026-12-04 07:24:52.5285 +0000`, as epoch microseconds."""
    whole, _, frac = clock.partition(".")
    base = datetime.strptime(f"{date} {whole} {zone}", "%Y-%m-%d %H:%M:%S %z")
    micros = int((frac + "000000")[:6]) if frac else 0
    return int(base.timestamp()) * 1_000_000 + micros


def read_events(path, namespace):
    """(topic, container_id, time_us) of the task events in the namespace, in file order."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            parts = raw.decode("utf-8", "replace").split(" ", 6)
            if len(parts) < 7 or parts[4] != namespace or not parts[5].startswith("/tasks/"):
                continue
            try:
                payload = json.loads(parts[6])
                when = event_time_us(parts[0], parts[1], parts[2])
            except ValueError:
                continue
            out.append((parts[5], payload.get("container_id", ""), payload.get("id"), when))
    return out


def cmd_events(args):
    app = {}
    with open(args.containers) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 2:
                app[fields[0]] = fields[1]
    started = {}
    deleted = {}
    for topic, cid, proc_id, when in read_events(args.events, args.namespace):
        if topic == "/tasks/start":
            started.setdefault(cid, when)
        # A task's own delete names no process (an exec's would name its exec id).
        elif topic == "/tasks/delete" and proc_id in (None, "", cid) and when >= args.teardown_us:
            deleted[cid] = when
    pods = defaultdict(list)
    for cid, pod in app.items():
        if cid in started:
            pods[pod].append(started[cid])
        else:
            print(f"vs_report.py: no task start seen for container {cid} of {pod}", file=sys.stderr)
    rows = []
    if pods:
        last = [max(times) for times in pods.values()]
        rows.append(("startup_ms", (max(last) - args.t0_us) / 1000))
        rows.extend(("pod_start_ms", (t - args.t0_us) / 1000) for t in sorted(last))
    missing = set(started) - set(deleted)
    if deleted and not missing:
        rows.append(("teardown_ms", (max(deleted.values()) - args.teardown_us) / 1000))
    elif missing:
        print(f"vs_report.py: {len(missing)} tasks started but not deleted", file=sys.stderr)
    for metric, value in rows:
        print(f"{metric},{value:.1f}")


def nearest_rank(values, p):
    ordered = sorted(values)
    rank = max(1, math.ceil(p * len(ordered) / 100))
    return ordered[rank - 1]


# (metric in the CSV, label, unit, how the rounds are combined). Costs are per run; the table
# shows their median over rounds. "node" sums what the node pays for its pods beside the pods
# themselves: agent + log writers + shims + containerd.
FIGURES = [
    ("startup_ms", "manifests written -> every container running", "ms", "median"),
    ("pod_start_ms", "per-pod start latency p50", "ms", "p50"),
    ("pod_start_ms", "per-pod start latency p99", "ms", "p99"),
    ("teardown_ms", "manifests removed -> no task left", "ms", "median"),
    ("agent_cpu_startup_s", "agent CPU during start-up", "s", "median"),
    ("agent_cpu_idle_s", "agent CPU over the idle window", "s", "median"),
    ("agent_hwm_startup_mib", "agent peak RSS at the end of start-up", "MiB", "median"),
    ("agent_hwm_mib", "agent peak RSS at the end of idle", "MiB", "median"),
    ("agent_pss_mib", "agent PSS", "MiB", "median"),
    ("loggers", "log writer processes (kubelet-rs only)", "", "median"),
    ("loggers_pss_mib", "log writers PSS", "MiB", "median"),
    ("loggers_cpu_startup_s", "log writers CPU during start-up", "s", "median"),
    ("loggers_cpu_idle_s", "log writers CPU over the idle window", "s", "median"),
    ("shims", "shim processes", "", "median"),
    ("shims_pss_mib", "shims PSS", "MiB", "median"),
    ("shims_cpu_startup_s", "shims CPU during start-up (with runc)", "s", "median"),
    ("shims_cpu_idle_s", "shims CPU over the idle window", "s", "median"),
    ("containerd_pss_mib", "containerd PSS", "MiB", "median"),
    ("containerd_cpu_startup_s", "containerd CPU during start-up", "s", "median"),
    ("containerd_cpu_idle_s", "containerd CPU over the idle window", "s", "median"),
    ("node_pss_mib", "node-wide PSS (agent + log writers + shims + containerd)", "MiB", "median"),
    ("node_cpu_startup_s", "node-wide CPU during start-up", "s", "median"),
    ("node_cpu_idle_s", "node-wide CPU over the idle window", "s", "median"),
]


def load(path):
    data = defaultdict(list)  # (workload, agent, metric) -> values
    rounds = defaultdict(set)  # (workload, agent) -> rounds
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            data[(row["workload"], row["agent"], row["metric"])].append(float(row["value"]))
            rounds[(row["workload"], row["agent"])].add(row["round"])
    return data, rounds


def combine(values, how):
    if not values:
        return None
    if how == "p50":
        return nearest_rank(values, 50)
    if how == "p99":
        return nearest_rank(values, 99)
    return statistics.median(values)


def fmt(value, unit):
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if not unit:
        return f"{value:g}"
    return f"{value:.1f} MiB"


def ratio(rs, up):
    if rs is None or up is None:
        return "-"
    if up == 0:
        return "-" if rs == 0 else "n/a (upstream 0)"
    return f"{rs / up:.2f}"


def workloads_in(data):
    seen = {w for (w, _, _) in data}
    return [w for w in WORKLOADS if w in seen] + sorted(seen - set(WORKLOADS))


def cmd_report(args):
    data, rounds = load(args.csv)
    for workload in workloads_in(data):
        label = WORKLOADS.get(workload, (workload,))[0]
        counts = ", ".join(f"{a} {len(rounds[(workload, a)])}" for a in AGENTS)
        print(f"\n#### {label} (`{workload}`; rounds: {counts})\n")
        print("| figure | kubelet-rs | upstream | kubelet-rs / upstream |")
        print("|---|---|---|---|")
        for metric, name, unit, how in FIGURES:
            rs = combine(data.get((workload, "kubelet-rs", metric), []), how)
            up = combine(data.get((workload, "upstream", metric), []), how)
            if rs is None and up is None:
                continue
            print(f"| {name} | {fmt(rs, unit)} | {fmt(up, unit)} | {ratio(rs, up)} |")
    if args.charts:
        charts(data, args.charts)


def charts(data, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("vs_report.py: matplotlib is missing (vs-upstream.sh installs it into a venv of its own)")
    colors = {"kubelet-rs": "tab:orange", "upstream": "tab:blue"}
    names = workloads_in(data)

    # Per-pod start latency: one empirical CDF per agent and workload.
    cols = min(3, len(names))
    rows_n = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.6 * rows_n), squeeze=False)
    for ax, workload in zip(axes.flat, names):
        for agent in AGENTS:
            values = sorted(data.get((workload, agent, "pod_start_ms"), []))
            if values:
                # From 0 at the first pod up to 1 at the last; markers show each pod when few.
                xs = [values[0]] + values
                ys = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
                ax.step(xs, ys, where="post", label=f"{agent} ({len(values)} pods)", color=colors[agent],
                        marker="o" if len(values) <= 30 else None, markersize=3)
        ax.set_title(WORKLOADS.get(workload, (workload,))[0], fontsize=10)
        ax.set_xlabel("manifests written -> pod's containers running (ms)")
        ax.set_ylabel("fraction of pods")
        ax.set_ylim(0, 1.05)
        longest = max((max(data.get((workload, a, "pod_start_ms"), [0])) for a in AGENTS), default=0)
        ax.set_xlim(0, longest * 1.05 or 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle("Per-pod start latency (all rounds)")
    fig.tight_layout()
    fig.savefig(f"{out}/latency.png", dpi=110)
    plt.close(fig)

    # Costs against the pod count, over the one-container workloads.
    series = sorted((WORKLOADS[w][1], w) for w in names if w in WORKLOADS and w.startswith("pods") and WORKLOADS[w][2] == 1)
    if not series:
        return
    panels = [
        ("agent_hwm_mib", "agent peak RSS (MiB)"),
        ("agent_pss_mib", "agent PSS (MiB)"),
        ("node_pss_mib", "node-wide PSS (MiB)"),
        ("agent_cpu_startup_s", "agent CPU during start-up (s)"),
        ("agent_cpu_idle_s", "agent CPU over the idle window (s)"),
        ("node_cpu_idle_s", "node-wide CPU over the idle window (s)"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), squeeze=False)
    for ax, (metric, title) in zip(axes.flat, panels):
        for agent in AGENTS:
            xs, ys = [], []
            for pods, workload in series:
                values = data.get((workload, agent, metric), [])
                if values:
                    xs.append(pods)
                    ys.append(statistics.median(values))
            if xs:
                ax.plot(xs, ys, marker="o", label=agent, color=colors[agent])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("pods (one container each)")
        ax.set_xscale("log")
        ax.set_xticks([p for p, _ in series], [str(p) for p, _ in series])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Agent and node costs against the pod count (median over rounds)")
    fig.tight_layout()
    fig.savefig(f"{out}/costs.png", dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("events")
    ev.add_argument("--events", required=True)
    ev.add_argument("--namespace", required=True)
    ev.add_argument("--containers", required=True)
    ev.add_argument("--t0-us", type=int, required=True)
    ev.add_argument("--teardown-us", type=int, required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--csv", required=True)
    rep.add_argument("--charts")
    args = parser.parse_args()
    {"events": cmd_events, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
