//! Cluster mode under faults, on a control plane of the test's own (stopping the shared
//! apiserver would disturb the other cluster tests): the apiserver gone for 60 s and back.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterNode};
use serde_json::Value;

/// The pod a container record belongs to, from its labels.
fn pod_of(ns: &str, id: &str) -> String {
    let (ok, out) = common::ctr(&["containers", "info", id], ns);
    assert!(ok, "{out}");
    let info: Value = serde_json::from_str(&out).expect("ctr prints JSON");
    info["Labels"]["io.kubernetes.pod.name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn apiserver_outage_leaves_pods_alone_and_statuses_catch_up() {
    const TEST: &str = "cluster-outage";
    let cp = Cluster::private(TEST, 400);
    let n = ClusterNode::start_in((*cp).clone(), TEST, &[]);
    let steady = n.create_pod("steady", "while true; do sleep 1; done", "");
    n.write_manifest(
        "static.yaml",
        &common::busybox_pod("static", "Always", "while true; do sleep 1; done"),
    );
    let mirror = n.pod_name("static");
    n.wait_api_pod(&steady, 90, "Running", is_running);
    let mirror_before = n.wait_api_pod(&mirror, 90, "the mirror is Running", is_running);
    // Finishes while the apiserver is away (it runs 30 s from its start, the outage 60 s from
    // just after): its Succeeded phase must reach the API once the apiserver is back.
    let short = n.create_pod("short", "sleep 30; echo done", "  restartPolicy: Never\n");
    n.wait_api_pod(&short, 90, "Running", is_running);
    let node_uid = n.node_object()["metadata"]["uid"].clone();
    let pods_before = n.api_pods().len();
    let tasks_before: Vec<_> = n.tasks().into_iter().filter(|t| t.2 == "RUNNING").collect();
    // Each task's pod, read now: the short pod's records may be gone (garbage collected) by
    // the time the outage check looks at them.
    let owners: std::collections::HashMap<String, String> = tasks_before
        .iter()
        .map(|t| (t.0.clone(), pod_of(&n.ns, &t.0)))
        .collect();

    cp.component("stop", "kube-apiserver");
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(60));
    // Nothing the agent ran was touched while it could not reach the apiserver (the short
    // pod's container exited on its own: only it may be missing).
    let tasks_during: Vec<_> = n.tasks().into_iter().filter(|t| t.2 == "RUNNING").collect();
    for t in &tasks_during {
        assert!(
            tasks_before.contains(t),
            "a container was started during the outage: {t:?}"
        );
    }
    for ended in tasks_before.iter().filter(|t| !tasks_during.contains(t)) {
        assert_eq!(
            owners[&ended.0], short,
            "only the short pod (its container, then its sandbox) may end during the outage"
        );
    }
    assert!(n.node.log().contains("kubelet-rs"), "agent log readable");
    assert!(stopped.elapsed() >= Duration::from_secs(60));

    cp.component("start", "kube-apiserver");
    n.wait_api(60, "the apiserver is back", |c| {
        c.kubectl(&["get", "--raw", "/readyz"]).0
    });
    let back = Instant::now();
    n.wait_api_pod(
        &short,
        30,
        "the short pod's Succeeded phase reached the API",
        |p| p["status"]["phase"] == "Succeeded",
    );
    let caught_up = back.elapsed();
    assert!(
        caught_up <= Duration::from_secs(10),
        "statuses caught up only after {caught_up:?}"
    );
    // The Lease is renewed again.
    let name = n.name().to_string();
    let lease = || {
        n.cluster
            .get(&["-n", "kube-node-lease", "lease", &name])
            .unwrap()
    };
    let renewed = lease()["spec"]["renewTime"].clone();
    n.wait_api(30, "the Lease is renewed after the outage", |_| {
        lease()["spec"]["renewTime"] != renewed
    });
    // Nothing created twice.
    assert_eq!(n.node_object()["metadata"]["uid"], node_uid);
    assert_eq!(n.api_pods().len(), pods_before, "{:?}", n.api_pods());
    let mirror_after = n.api_pod(&mirror).unwrap();
    assert_eq!(
        mirror_after["metadata"]["uid"],
        mirror_before["metadata"]["uid"]
    );
    let mut tasks_after: Vec<_> = n.tasks().into_iter().filter(|t| t.2 == "RUNNING").collect();
    let mut tasks_during = tasks_during;
    tasks_after.sort();
    tasks_during.sort();
    assert_eq!(
        tasks_after, tasks_during,
        "containers changed after the outage"
    );
}
