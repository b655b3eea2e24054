//! In-place pod resize in the pass: a resize applied without a restart, in upstream's
//! order (the pod cgroup's limit raised before its containers', lowered after them; memory
//! before cpu), status allocatedResources/resources, PodResizePending reasons, the
//! allocation kept across an agent restart, and resizePolicy RestartContainer. The pod
//! cgroups live in a fake v2 tree in a temporary folder; the fake runtime notes the pod
//! cgroup's values at each container update.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use serde_json::json;

use super::*;
use crate::cgroups::CgroupfsV2;
use crate::cm::ContainerManager;

fn resized(cpu: &str, memory: &str, policy: Option<&str>) -> Pod {
    let c = json!({"name": "app", "image": "busybox",
        "resources": {"requests": {"cpu": cpu, "memory": memory},
                      "limits": {"cpu": cpu, "memory": memory}}});
    with_policy(c, policy.map(|p| ("cpu", p)))
}

/// A pod of the one container `c`, whose `resource` has the resizePolicy given.
fn with_policy(mut c: serde_json::Value, policy: Option<(&str, &str)>) -> Pod {
    if let Some((resource, p)) = policy {
        c["resizePolicy"] = json!([{"resourceName": resource, "restartPolicy": p}]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID,
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"hostNetwork": true, "terminationGracePeriodSeconds": 5, "containers": [c]}
    }))
    .unwrap()
}

/// The pod's (Guaranteed) cgroup in the fake tree.
fn pod_cgroup(root: &Path) -> PathBuf {
    root.join("kubepods").join(format!("pod{UID}"))
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// A harness whose pods get cgroups in a fake v2 tree (returned), the worker's
/// allocations checkpointed under `dir`.
fn resize_harness(dir: &Path) -> (Harness, PathBuf) {
    let cgroups = dir.join("cgroup");
    // The pod uses nothing yet: any memory limit is above its usage.
    std::fs::create_dir_all(pod_cgroup(&cgroups)).unwrap();
    std::fs::write(pod_cgroup(&cgroups).join("memory.current"), "0").unwrap();
    let h = harness();
    let mut shared = Arc::into_inner(h.shared).expect("the only reference");
    let capacity = BTreeMap::from([
        ("cpu".to_string(), 2000),
        ("memory".to_string(), 8 << 30),
        ("pid".to_string(), 32_768),
    ]);
    let cm = ContainerManager::new(
        Arc::new(CgroupfsV2::at(&cgroups)),
        &Config::defaults(true),
        &capacity,
    );
    shared.cm = Some(Arc::new(cm));
    shared.allocations = Arc::new(crate::pod::allocation::Allocations::load(dir));
    let noted = cgroups.clone();
    h.fake.note_updates(move |_| {
        // A Burstable pod's cgroup is elsewhere: its values show empty.
        let at = |f: &str| {
            std::fs::read_to_string(pod_cgroup(&noted).join(f))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        format!(
            "pod[memory.max={} cpu.max={}]",
            at("memory.max"),
            at("cpu.max")
        )
    });
    (
        Harness {
            fake: h.fake,
            shared: Arc::new(shared),
            _dir: h._dir,
        },
        cgroups,
    )
}

fn condition(h: &Harness, kind: &str) -> Option<PodCondition> {
    pod_status(h)
        .conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == kind)
}

fn quantity(
    m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    k: &str,
) -> String {
    m.as_ref()
        .and_then(|m| m.get(k))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_resize_is_applied_in_place_pod_cgroup_first_up_and_last_down() {
    let dir = tempfile::tempdir().unwrap();
    let (h, cgroups) = resize_harness(dir.path());
    let p = resized("500m", "128Mi", None);
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    assert_eq!(read(pod_cgroup(&cgroups).join("cpu.max")), "50000 100000");
    assert_eq!(
        read(pod_cgroup(&cgroups).join("memory.max")),
        (128u64 << 20).to_string()
    );

    // Up: memory first (the pod's limit raised before the container's), then cpu.
    let up = resized("1", "256Mi", None);
    w.pass(&up).await;
    assert_eq!(
        h.fake.calls_of("update_resources"),
        [
            "update_resources app#0 shares=512 quota=50000 memory=268435456 pod[memory.max=268435456 cpu.max=50000 100000]",
            "update_resources app#0 shares=1024 quota=100000 memory=268435456 pod[memory.max=268435456 cpu.max=100000 100000]",
        ]
    );
    assert_eq!(read(pod_cgroup(&cgroups).join("cpu.weight")), "39");
    let app = status_of(&h, "app");
    assert_eq!(app.restart_count, 0);
    assert_eq!(
        h.fake.calls_of("start_task").len(),
        2,
        "POD and app, nothing restarted"
    );
    assert_eq!(quantity(&app.allocated_resources, "cpu"), "1");
    let actual = app.resources.clone().unwrap();
    assert_eq!(quantity(&actual.limits, "memory"), "256Mi");
    assert!(condition(&h, "PodResizePending").is_none());
    assert!(condition(&h, "PodResizeInProgress").is_none());
    let spec = h.fake.spec_of("app").unwrap();
    let res = spec.linux().as_ref().unwrap().resources().clone().unwrap();
    assert_eq!(
        res.memory().as_ref().unwrap().limit(),
        Some(256 << 20),
        "the record's spec follows"
    );

    // Down: the container's limits lowered while the pod's are still the old ones.
    h.fake.clear_calls();
    let down = resized("250m", "64Mi", None);
    w.pass(&down).await;
    assert_eq!(
        h.fake.calls_of("update_resources"),
        [
            "update_resources app#0 shares=1024 quota=100000 memory=67108864 pod[memory.max=268435456 cpu.max=100000 100000]",
            "update_resources app#0 shares=256 quota=25000 memory=67108864 pod[memory.max=67108864 cpu.max=100000 100000]",
        ]
    );
    assert_eq!(read(pod_cgroup(&cgroups).join("cpu.max")), "25000 100000");
    assert_eq!(
        read(pod_cgroup(&cgroups).join("memory.max")),
        (64u64 << 20).to_string()
    );

    // A pod using more than the new memory limit keeps its limits: PodResizeInProgress Error.
    std::fs::write(
        pod_cgroup(&cgroups).join("memory.current"),
        (100u64 << 20).to_string(),
    )
    .unwrap();
    // So does its container (in the tree as the cgroupfs driver names it).
    let id = status_of(&h, "app").container_id.unwrap();
    let id = id.rsplit('/').next().unwrap();
    std::fs::create_dir_all(pod_cgroup(&cgroups).join(id)).unwrap();
    std::fs::write(
        pod_cgroup(&cgroups).join(id).join("memory.current"),
        (90u64 << 20).to_string(),
    )
    .unwrap();
    h.fake.clear_calls();
    w.pass(&resized("250m", "32Mi", None)).await;
    assert!(h.fake.calls_of("update_resources").is_empty());
    let c = condition(&h, "PodResizeInProgress").expect("in progress");
    assert_eq!(c.reason.as_deref(), Some("Error"));
    assert_eq!(
        c.message.as_deref(),
        Some(
            "cannot decrease memory limits: [attempting to set pod memory limit (33554432) below current usage (104857600), \
             attempting to set container \"app\" memory limit (33554432) below current usage (94371840)]"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn an_infeasible_resize_stays_pending_across_an_agent_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (h, _cgroups) = resize_harness(dir.path());
    let p = resized("500m", "128Mi", None);
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let huge = resized("100", "128Mi", None);
    w.pass(&huge).await;
    let c = condition(&h, "PodResizePending").expect("pending");
    assert_eq!(c.reason.as_deref(), Some("Infeasible"));
    assert_eq!(
        c.message.as_deref(),
        Some("Node didn't have enough capacity: cpu, requested: 100000, capacity: 2000")
    );
    assert!(h.fake.calls_of("update_resources").is_empty());
    assert_eq!(
        quantity(&status_of(&h, "app").allocated_resources, "cpu"),
        "500m"
    );

    // The agent restarts: a new worker and allocations read back from the checkpoint.
    drop(w);
    let mut shared = Arc::into_inner(h.shared).expect("the only reference");
    shared.allocations = Arc::new(crate::pod::allocation::Allocations::load(dir.path()));
    let h2 = Harness {
        fake: h.fake,
        shared: Arc::new(shared),
        _dir: h._dir,
    };
    let mut w2 = worker(&h2, &huge);
    w2.pass(&huge).await;
    assert!(h2.fake.calls_of("update_resources").is_empty());
    assert_eq!(
        quantity(&status_of(&h2, "app").allocated_resources, "cpu"),
        "500m"
    );
    assert_eq!(
        condition(&h2, "PodResizePending")
            .and_then(|c| c.reason)
            .as_deref(),
        Some("Infeasible")
    );
}

#[tokio::test(start_paused = true)]
async fn a_resize_that_does_not_fit_beside_other_pods_is_deferred_until_one_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let (h, _cgroups) = resize_harness(dir.path());
    let mut other = resized("1500m", "128Mi", None);
    other.metadata.uid = Some("other-uid".into());
    h.shared.allocations.set(&other).unwrap();
    let p = resized("500m", "128Mi", None);
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let more = resized("1", "128Mi", None);
    w.pass(&more).await;
    let c = condition(&h, "PodResizePending").expect("pending");
    assert_eq!(c.reason.as_deref(), Some("Deferred"));
    assert_eq!(
        c.message.as_deref(),
        Some("Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000")
    );
    assert!(h.fake.calls_of("update_resources").is_empty());

    h.shared.allocations.remove("other-uid");
    w.pass(&more).await;
    assert!(condition(&h, "PodResizePending").is_none());
    assert_eq!(
        quantity(&status_of(&h, "app").allocated_resources, "cpu"),
        "1"
    );
    assert_eq!(h.fake.calls_of("update_resources").len(), 1, "cpu only");
}

#[tokio::test(start_paused = true)]
async fn restart_container_policy_restarts_the_container_with_its_new_resources() {
    let dir = tempfile::tempdir().unwrap();
    let (h, _cgroups) = resize_harness(dir.path());
    let p = resized("500m", "128Mi", Some("RestartContainer"));
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let up = resized("1", "128Mi", Some("RestartContainer"));
    w.pass(&up).await;
    w.pass(&up).await;
    assert!(h.fake.calls_of("update_resources").is_empty());
    assert_eq!(
        h.fake.calls_of("start_task"),
        ["start_task POD#0", "start_task app#0", "start_task app#1"]
    );
    let app = status_of(&h, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(quantity(&app.resources.unwrap().limits, "cpu"), "1");
    let spec = h.fake.spec_of("app").unwrap();
    let res = spec.linux().as_ref().unwrap().resources().clone().unwrap();
    assert_eq!(res.cpu().as_ref().unwrap().quota(), Some(100_000));
}

#[tokio::test(start_paused = true)]
async fn a_container_restarted_for_a_smaller_cpu_is_stopped_before_the_pod_cgroup_shrinks() {
    // On cgroup v1 a pod cgroup's cpu quota cannot go under a child's: the container that
    // still has the old quota goes first, and its successor starts under the new one.
    let dir = tempfile::tempdir().unwrap();
    let (h, _cgroups) = resize_harness(dir.path());
    let p = resized("1", "128Mi", Some("RestartContainer"));
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let down = resized("500m", "128Mi", Some("RestartContainer"));
    w.pass(&down).await;
    w.pass(&down).await;
    let noted = h.fake.calls_of("noted");
    let at = |prefix: &str| {
        noted
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {noted:?}"))
            .clone()
    };
    assert!(
        at("noted kill app#0").ends_with("cpu.max=100000 100000]"),
        "{noted:?}"
    );
    // Its task (and with it its cgroup) is gone before the pod's quota is lowered too.
    assert!(
        at("noted delete_task app#0").ends_with("cpu.max=100000 100000]"),
        "{noted:?}"
    );
    assert!(
        at("noted start_task app#1").ends_with("cpu.max=50000 100000]"),
        "{noted:?}"
    );
    assert_eq!(status_of(&h, "app").restart_count, 1);
}

#[tokio::test(start_paused = true)]
async fn a_memory_request_change_alone_restarts_a_restart_container_memory_policy() {
    // Upstream compares the memory request too: under RestartContainer a new request
    // restarts the container, though no cgroup holds it.
    let dir = tempfile::tempdir().unwrap();
    let (h, _cgroups) = resize_harness(dir.path());
    let burstable = |request: &str| {
        with_policy(
            json!({"name": "app", "image": "busybox",
                "resources": {"requests": {"cpu": "500m", "memory": request},
                              "limits": {"cpu": "500m", "memory": "256Mi"}}}),
            Some(("memory", "RestartContainer")),
        )
    };
    let p = burstable("200Mi");
    let mut w = worker(&h, &p);
    w.pass(&p).await;
    let down = burstable("100Mi");
    w.pass(&down).await;
    w.pass(&down).await;
    assert_eq!(
        h.fake.calls_of("start_task"),
        ["start_task POD#0", "start_task app#0", "start_task app#1"]
    );
    let app = status_of(&h, "app");
    assert_eq!(app.restart_count, 1);
    assert_eq!(quantity(&app.allocated_resources, "memory"), "100Mi");
    assert_eq!(
        quantity(&app.resources.unwrap().requests, "memory"),
        "100Mi"
    );
}
