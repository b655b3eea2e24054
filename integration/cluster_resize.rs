//! In-place pod resize against the real control plane (the `pods/resize` subresource) and
//! real cgroups v1: cpu and memory raised and lowered on a running pod without a restart
//! (same container ID, restartCount 0), the pod and container cgroup files following, status
//! allocatedResources/resources following; a resize beyond the node is PodResizePending
//! Infeasible and stays so, with the old allocation, across a kill -9 of the agent; a
//! container whose resizePolicy says RestartContainer is restarted, alone.
//!
//! The agent works under its own --cgroup-root, removed at the end.

mod common;

use std::path::PathBuf;

use common::cluster::ClusterNode;
use common::*;
use serde_json::Value;

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

fn status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn condition_reason(pod: &Value, kind: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| c["reason"].as_str().unwrap_or("").to_string())
}

fn resize(n: &ClusterNode, pod: &str, containers: &[(&str, &str, &str)]) {
    let list: Vec<Value> = containers
        .iter()
        .map(|(name, cpu, mem)| {
            let r = serde_json::json!({"cpu": cpu, "memory": mem});
            serde_json::json!({"name": name, "resources": {"requests": r, "limits": r}})
        })
        .collect();
    let patch = serde_json::json!({"spec": {"containers": list}}).to_string();
    n.cluster.ok(&[
        "-n",
        "default",
        "patch",
        "pod",
        pod,
        "--subresource",
        "resize",
        "--patch",
        &patch,
    ]);
}

/// The pod once `name`'s allocated and actual cpu and memory are these and no resize is
/// in progress.
fn wait_resized(n: &ClusterNode, pod: &str, name: &str, cpu: &str, mem: &str) -> Value {
    n.wait_api_pod(pod, 90, &format!("{name} resized to {cpu}/{mem}"), |p| {
        let s = status(p, name);
        s["allocatedResources"]["cpu"] == cpu
            && s["allocatedResources"]["memory"] == mem
            && s["resources"]["limits"]["cpu"] == cpu
            && s["resources"]["limits"]["memory"] == mem
            && condition_reason(p, "PodResizeInProgress").is_none()
            && condition_reason(p, "PodResizePending").is_none()
    })
}

fn container_cgroup(pod: &Value, root: &str, name: &str) -> String {
    let id = status(pod, name)["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    format!(
        "{root}/kubepods/pod{}/{id}",
        pod["metadata"]["uid"].as_str().unwrap()
    )
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_running_pod_is_resized_in_place_and_keeps_its_allocation_across_a_restart() {
    let root = format!("/krs-resize-test-{}", std::process::id());
    let mut n = ClusterNode::start("cluster-resize", &[&format!("--cgroup-root={root}")]);
    let side = format!(
        "    resources: {{requests: {{cpu: 200m, memory: 64Mi}}, limits: {{cpu: 200m, memory: 64Mi}}}}
  - name: side
    image: {BUSYBOX}
    command: ['sleep', '3600']
    resources: {{requests: {{cpu: 100m, memory: 32Mi}}, limits: {{cpu: 100m, memory: 32Mi}}}}
    resizePolicy: [{{resourceName: cpu, restartPolicy: RestartContainer}}]
"
    );
    let pod = n.create_pod("resize", "sleep 3600", &side);
    let first = n.wait_api_pod(&pod, 120, "Running", |p| {
        p["status"]["phase"] == "Running" && status(p, "main")["ready"] == true
    });
    let uid = first["metadata"]["uid"].as_str().unwrap().to_string();
    let pod_cg = format!("{root}/kubepods/pod{uid}");
    let main_id = status(&first, "main")["containerID"].clone();
    assert_eq!(file("cpu", &pod_cg, "cpu.cfs_quota_us"), "30000");

    // Up.
    resize(&n, &pod, &[("main", "400m", "128Mi")]);
    let up = wait_resized(&n, &pod, "main", "400m", "128Mi");
    assert_eq!(
        status(&up, "main")["containerID"],
        main_id,
        "main was replaced"
    );
    assert_eq!(status(&up, "main")["restartCount"], 0);
    let main_cg = container_cgroup(&up, &root, "main");
    assert_eq!(file("cpu", &pod_cg, "cpu.cfs_quota_us"), "50000");
    assert_eq!(
        file("memory", &pod_cg, "memory.limit_in_bytes"),
        (160u64 << 20).to_string()
    );
    assert_eq!(file("cpu", &main_cg, "cpu.cfs_quota_us"), "40000");
    assert_eq!(file("cpu", &main_cg, "cpu.shares"), "409");
    assert_eq!(
        file("memory", &main_cg, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );

    // Down.
    resize(&n, &pod, &[("main", "150m", "48Mi")]);
    let down = wait_resized(&n, &pod, "main", "150m", "48Mi");
    assert_eq!(status(&down, "main")["containerID"], main_id);
    assert_eq!(status(&down, "main")["restartCount"], 0);
    assert_eq!(file("cpu", &pod_cg, "cpu.cfs_quota_us"), "25000");
    assert_eq!(
        file("memory", &pod_cg, "memory.limit_in_bytes"),
        (80u64 << 20).to_string()
    );
    assert_eq!(file("cpu", &main_cg, "cpu.cfs_quota_us"), "15000");
    assert_eq!(
        file("memory", &main_cg, "memory.limit_in_bytes"),
        (48u64 << 20).to_string()
    );

    // Beyond the node: pending, Infeasible; nothing changes, not even after a kill -9.
    resize(&n, &pod, &[("main", "1000", "48Mi")]);
    n.wait_api_pod(&pod, 60, "PodResizePending Infeasible", |p| {
        condition_reason(p, "PodResizePending").as_deref() == Some("Infeasible")
    });
    n.kill9();
    n.launch();
    std::thread::sleep(std::time::Duration::from_secs(10));
    let after = n.wait_api_pod(&pod, 60, "still Infeasible", |p| {
        condition_reason(p, "PodResizePending").as_deref() == Some("Infeasible")
    });
    assert_eq!(status(&after, "main")["allocatedResources"]["cpu"], "150m");
    assert_eq!(status(&after, "main")["containerID"], main_id);
    assert_eq!(file("cpu", &main_cg, "cpu.cfs_quota_us"), "15000");

    // RestartContainer: side restarts with its new cpu, main stays.
    resize(
        &n,
        &pod,
        &[("main", "150m", "48Mi"), ("side", "300m", "32Mi")],
    );
    wait_resized(&n, &pod, "side", "300m", "32Mi");
    let restarted = n.wait_api_pod(&pod, 60, "side running again", |p| {
        status(p, "side")["restartCount"] == 1 && status(p, "side")["ready"] == true
    });
    assert_eq!(status(&restarted, "main")["restartCount"], 0);
    assert_eq!(status(&restarted, "main")["containerID"], main_id);
    let side_cg = container_cgroup(&restarted, &root, "side");
    assert_eq!(file("cpu", &side_cg, "cpu.cfs_quota_us"), "30000");

    drop(n);
    let left = cgroups::remove_tree(&root);
    assert!(left.is_empty(), "cgroups left: {left:?}");
}
