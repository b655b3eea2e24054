//! Pod and QoS cgroups on real cgroups v1 with real containers: one pod of each QoS class,
//! their pod cgroups' files against upstream's numbers (MilliCPUToShares, MilliCPUToQuota,
//! the summed limits, podPidsLimit), the QoS parents (BestEffort 2 shares, Burstable the
//! shares of its pods' requests), kubepods limited to node allocatable (capacity minus
//! kubeReserved and systemReserved), the tree kept as it is when the agent restarts with
//! pods running, and each pod's cgroup gone once the pod is.
//!
//! The agent works under its own --cgroup-root, so the limits it writes never touch the
//! /kubepods that other agents on this host share; the test removes that root at the end
//! and fails if any of it stays.

mod common;

use std::path::PathBuf;

use common::*;

/// The v1 hierarchies the agent writes.
const HIERARCHIES: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];

fn file(controller: &str, cgroup: &str, name: &str) -> String {
    let path = PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(cgroup.trim_start_matches('/'))
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

fn number(controller: &str, cgroup: &str, name: &str) -> i64 {
    let text = file(controller, cgroup, name);
    text.parse()
        .unwrap_or_else(|_| panic!("{cgroup}/{name}: {text:?} is not a number"))
}

/// Upstream's MilliCPUToShares and MilliCPUToQuota, restated so the test checks the
/// agent's numbers against the formula rather than against the agent's own code.
fn shares(milli: i64) -> i64 {
    if milli == 0 {
        return 2;
    }
    (milli * 1024 / 1000).clamp(2, 262_144)
}

fn quota(milli: i64) -> i64 {
    (milli * 100_000 / 1000).max(1000)
}

fn host_number(cmd: &[&str]) -> i64 {
    let out = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .expect("runs");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn max_pid() -> i64 {
    let read = |p: &str| -> i64 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    read("/proc/sys/kernel/pid_max").min(read("/proc/sys/kernel/threads-max"))
}

fn pod_manifest(name: &str, resources: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    command: ["sh", "-c", "exec sleep 3600"]
    resources: {resources}
"#
    )
}

fn uid_of(node: &Node, name: &str) -> String {
    node.pod(name).expect("pod listed")["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Where a cgroup exists in any hierarchy (the agent's four, and the ones runc adds).
fn present(cgroup: &str) -> Vec<PathBuf> {
    cgroups::existing(cgroup)
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn qos_classes_pod_cgroups_and_node_allocatable() {
    let root = format!("/krs-qos-test-{}", std::process::id());
    let kubepods = format!("{root}/kubepods");
    let mut node = Node::start_with(
        "qos cgroups",
        &[
            &format!("--cgroup-root={root}"),
            "--kube-reserved=cpu=200m,memory=256Mi",
            "--system-reserved=memory=128Mi,pid=1000",
            "--pod-max-pids=512",
        ],
    );
    node.write_manifest(
        "g.yaml",
        &pod_manifest("g", r#"{limits: {cpu: 500m, memory: 64Mi}}"#),
    );
    node.write_manifest(
        "b.yaml",
        &pod_manifest(
            "b",
            r#"{requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 300m, memory: 128Mi}}"#,
        ),
    );
    node.write_manifest("e.yaml", &pod_manifest("e", "{}"));
    for name in ["g", "b", "e"] {
        node.wait_pod(name, 120, "Running", |p| p["status"]["phase"] == "Running");
    }
    let (g, b, e) = (uid_of(&node, "g"), uid_of(&node, "b"), uid_of(&node, "e"));
    let g_cg = format!("{kubepods}/pod{g}");
    let b_cg = format!("{kubepods}/burstable/pod{b}");
    let e_cg = format!("{kubepods}/besteffort/pod{e}");

    // kubepods: node allocatable. The first enforcement runs right after start-up; wait
    // for it rather than assume it. v1 rounds a memory limit down to whole pages.
    let cores = host_number(&["getconf", "_NPROCESSORS_ONLN"]);
    let page = host_number(&["getconf", "PAGESIZE"]);
    let memory = mem_total() - (256 << 20) - (128 << 20);
    let memory = memory / page * page;
    node.wait_until(180, "kubepods limited to node allocatable", || {
        file("memory", &kubepods, "memory.limit_in_bytes") == memory.to_string()
    });
    assert_eq!(
        number("cpu", &kubepods, "cpu.shares"),
        shares(cores * 1000 - 200)
    );
    assert_eq!(number("pids", &kubepods, "pids.max"), max_pid() - 1000);
    assert_eq!(
        number("cpu", &kubepods, "cpu.cfs_quota_us"),
        -1,
        "never a quota"
    );

    // The QoS parents.
    assert_eq!(
        number("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
        2
    );
    assert_eq!(
        number("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
        shares(100)
    );

    // Guaranteed: shares, quota and memory from its limits; pids from podPidsLimit.
    assert_eq!(number("cpu", &g_cg, "cpu.shares"), shares(500));
    assert_eq!(number("cpu", &g_cg, "cpu.cfs_quota_us"), quota(500));
    assert_eq!(number("cpu", &g_cg, "cpu.cfs_period_us"), 100_000);
    assert_eq!(number("memory", &g_cg, "memory.limit_in_bytes"), 64 << 20);
    assert_eq!(number("pids", &g_cg, "pids.max"), 512);
    // NoSwap (upstream's default swap behaviour) where swap is accounted: the container
    // may use no swap beyond its memory limit.
    if std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists() {
        let g_dir = PathBuf::from("/sys/fs/cgroup/memory").join(g_cg.trim_start_matches('/'));
        let leaves: Vec<_> = std::fs::read_dir(&g_dir)
            .unwrap()
            .flatten()
            .filter(|d| d.path().is_dir())
            .map(|d| format!("{g_cg}/{}", d.file_name().to_string_lossy()))
            .filter(|cg| number("memory", cg, "memory.limit_in_bytes") == 64 << 20)
            .collect();
        assert_eq!(leaves.len(), 1, "the app container's leaf: {leaves:?}");
        assert_eq!(
            number("memory", &leaves[0], "memory.memsw.limit_in_bytes"),
            64 << 20,
            "memory+swap capped at the memory limit"
        );
    }
    // Burstable whose only container limits both: its requests weigh, its limits cap.
    assert_eq!(number("cpu", &b_cg, "cpu.shares"), shares(100));
    assert_eq!(number("cpu", &b_cg, "cpu.cfs_quota_us"), quota(300));
    assert_eq!(number("memory", &b_cg, "memory.limit_in_bytes"), 128 << 20);
    assert_eq!(number("pids", &b_cg, "pids.max"), 512);
    // BestEffort: the minimum weight and no cap.
    assert_eq!(number("cpu", &e_cg, "cpu.shares"), 2);
    assert_eq!(number("cpu", &e_cg, "cpu.cfs_quota_us"), -1);
    assert!(
        number("memory", &e_cg, "memory.limit_in_bytes") > 1 << 62,
        "no memory limit"
    );
    assert_eq!(number("pids", &e_cg, "pids.max"), 512);
    // The pods' containers run inside their pod's cgroup.
    for cg in [&g_cg, &b_cg, &e_cg] {
        let procs = file("cpu", cg, "cgroup.procs");
        let tasks_below =
            std::fs::read_dir(PathBuf::from("/sys/fs/cgroup/cpu").join(cg.trim_start_matches('/')))
                .unwrap()
                .flatten()
                .filter(|d| d.path().is_dir())
                .count();
        assert!(
            procs.is_empty() && tasks_below >= 2,
            "{cg}: sandbox and container leaves"
        );
    }

    // A restart with pods running changes nothing: same processes, same values.
    let sorted = |mut t: Vec<(String, u32, String)>| {
        t.sort();
        t
    };
    let before = sorted(node.tasks());
    node.kill9();
    node.launch();
    node.wait_until(120, "all three pods Running after the restart", || {
        ["g", "b", "e"].iter().all(|n| {
            node.pod(n)
                .is_some_and(|p| p["status"]["phase"] == "Running")
        })
    });
    // The burstable parent is rewritten from the pods the workers report again.
    node.wait_until(60, "burstable shares back from the pod's request", || {
        number("cpu", &format!("{kubepods}/burstable"), "cpu.shares") == shares(100)
    });
    let after = sorted(node.tasks());
    assert_eq!(before, after, "no container restarted");
    assert_eq!(number("memory", &g_cg, "memory.limit_in_bytes"), 64 << 20);

    // Pods that go take their cgroup with them and their weight off the parent.
    node.remove_manifest("e.yaml");
    node.wait_gone("e", 60);
    node.wait_until(30, "the BestEffort pod's cgroup removed", || {
        present(&e_cg).is_empty()
    });
    node.remove_manifest("b.yaml");
    node.wait_gone("b", 60);
    node.wait_until(30, "the Burstable pod's cgroup removed", || {
        present(&b_cg).is_empty()
    });
    assert_eq!(
        number("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
        2
    );
    assert!(!present(&g_cg).is_empty());
    for h in HIERARCHIES {
        assert!(
            PathBuf::from("/sys/fs/cgroup")
                .join(h)
                .join(g_cg.trim_start_matches('/'))
                .is_dir(),
            "{h}"
        );
    }

    // The node's drop stops the last pod; then the test's own root goes, all of it.
    drop(node);
    let left = cgroups::remove_tree(&root);
    assert!(left.is_empty(), "cgroups left under {root}: {left:?}");
}
