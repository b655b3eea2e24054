//! The manager over a fake cgroup tree (v1 and v2 in a temporary folder): the files it
//! writes for kubepods, the QoS parents and pods of each class, and what it removes.

use std::path::{Path, PathBuf};

use super::*;
use crate::cgroups::{CgroupfsV1, CgroupfsV2};
use crate::vocabulary::quantity::Quantity;

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

fn capacity() -> Amounts {
    BTreeMap::from([
        ("cpu".to_string(), 2000),
        ("memory".to_string(), 4 << 30),
        ("pid".to_string(), 32_768),
    ])
}

fn config() -> Config {
    let mut cfg = Config::defaults(true);
    cfg.kube_reserved = BTreeMap::from([("memory".to_string(), Quantity::parse("512Mi").unwrap())]);
    cfg.system_reserved = BTreeMap::from([("cpu".to_string(), Quantity::parse("500m").unwrap())]);
    cfg.pod_pids_limit = 256;
    cfg
}

fn pod(uid: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "uid": uid},
        "spec": {"containers": [{"name": "c", "resources": resources}]}
    }))
    .unwrap()
}

/// A removed fake cgroup: rmdir fails on a real-looking folder with files, so the test
/// empties it the way the kernel would see it (no processes, no children).
fn clear_files(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                clear_files(&e.path());
            } else {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[test]
fn v1_tree_for_each_qos_class_and_node_allocatable() {
    let dir = tempfile::tempdir().unwrap();
    let cm = ContainerManager::new(Arc::new(CgroupfsV1::at(dir.path())), &config(), &capacity());
    cm.start().unwrap();
    let file = |c: &str, cg: &str, f: &str| read(dir.path().join(c).join(cg).join(f));
    // kubepods: capacity − kubeReserved − systemReserved.
    assert_eq!(file("cpu", "kubepods", "cpu.shares"), "1536");
    assert_eq!(
        file("memory", "kubepods", "memory.limit_in_bytes"),
        ((4i64 << 30) - (512 << 20)).to_string()
    );
    assert_eq!(file("pids", "kubepods", "pids.max"), "32768");
    assert_eq!(file("cpu", "kubepods/besteffort", "cpu.shares"), "2");
    assert_eq!(file("cpu", "kubepods/burstable", "cpu.shares"), "2");

    let g = pod(
        "g",
        serde_json::json!({"limits": {"cpu": "1", "memory": "128Mi"}}),
    );
    let b = pod(
        "b",
        serde_json::json!({"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}),
    );
    let e = pod("e", serde_json::json!({}));
    assert_eq!(cm.ensure_pod(&g).unwrap(), "/kubepods/podg");
    assert_eq!(cm.ensure_pod(&b).unwrap(), "/kubepods/burstable/podb");
    assert_eq!(cm.ensure_pod(&e).unwrap(), "/kubepods/besteffort/pode");

    assert_eq!(file("cpu", "kubepods/podg", "cpu.shares"), "1024");
    assert_eq!(file("cpu", "kubepods/podg", "cpu.cfs_quota_us"), "100000");
    assert_eq!(file("cpu", "kubepods/podg", "cpu.cfs_period_us"), "100000");
    assert_eq!(
        file("memory", "kubepods/podg", "memory.limit_in_bytes"),
        (128 << 20).to_string()
    );
    assert_eq!(file("pids", "kubepods/podg", "pids.max"), "256");

    assert_eq!(file("cpu", "kubepods/burstable/podb", "cpu.shares"), "256");
    assert_eq!(
        file("cpu", "kubepods/burstable/podb", "cpu.cfs_quota_us"),
        "50000"
    );
    assert_eq!(
        file("memory", "kubepods/burstable/podb", "memory.limit_in_bytes"),
        (64 << 20).to_string()
    );
    assert_eq!(
        file("cpu", "kubepods/burstable", "cpu.shares"),
        "256",
        "the burstable pods' requests"
    );

    assert_eq!(file("cpu", "kubepods/besteffort/pode", "cpu.shares"), "2");
    assert!(!dir
        .path()
        .join("cpu/kubepods/besteffort/pode/cpu.cfs_quota_us")
        .exists());
    assert!(!dir
        .path()
        .join("memory/kubepods/besteffort/pode/memory.limit_in_bytes")
        .exists());
    assert_eq!(file("pids", "kubepods/besteffort/pode", "pids.max"), "256");

    // A second Burstable pod adds its request; removing one takes it away again.
    let b2 = pod("b2", serde_json::json!({"requests": {"cpu": "750m"}}));
    cm.ensure_pod(&b2).unwrap();
    assert_eq!(file("cpu", "kubepods/burstable", "cpu.shares"), "1024");
    clear_files(&dir.path().join("cpu/kubepods/burstable/podb2"));
    for c in ["cpuacct", "memory", "pids"] {
        clear_files(&dir.path().join(c).join("kubepods/burstable/podb2"));
    }
    assert!(cm.remove_pod("b2").is_empty());
    assert!(!dir.path().join("cpu/kubepods/burstable/podb2").exists());
    assert_eq!(file("cpu", "kubepods/burstable", "cpu.shares"), "256");
}

#[test]
fn v2_tree_uses_weights_and_max() {
    let dir = tempfile::tempdir().unwrap();
    let cm = ContainerManager::new(Arc::new(CgroupfsV2::at(dir.path())), &config(), &capacity());
    cm.start().unwrap();
    let file = |cg: &str, f: &str| read(dir.path().join(cg).join(f));
    assert_eq!(file("kubepods", "cpu.weight"), shares_weight(1536));
    assert_eq!(
        file("kubepods", "memory.max"),
        ((4i64 << 30) - (512 << 20)).to_string()
    );
    assert_eq!(file("kubepods", "pids.max"), "32768");
    assert_eq!(file("kubepods/besteffort", "cpu.weight"), "1");
    let b = pod(
        "b",
        serde_json::json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
    );
    cm.ensure_pod(&b).unwrap();
    assert_eq!(file("kubepods/burstable/podb", "cpu.weight"), "39");
    assert_eq!(file("kubepods/burstable/podb", "cpu.max"), "200000 100000");
    assert_eq!(
        file("kubepods/burstable/podb", "memory.max"),
        (1u64 << 30).to_string()
    );
    assert_eq!(file("kubepods/burstable", "cpu.weight"), "39");
}

fn shares_weight(shares: u64) -> String {
    crate::cgroups::shares_to_weight(shares).to_string()
}

#[test]
fn systemd_names_under_a_cgroup_root() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.cgroup_driver = CgroupDriver::Systemd;
    // Upstream's spelling of cgroupRoot for either driver (kind's `/kubelet`).
    cfg.cgroup_root = "/test".into();
    let cm = ContainerManager::new(Arc::new(CgroupfsV1::at(dir.path())), &cfg, &capacity());
    cm.start().unwrap();
    let b = pod("1-2", serde_json::json!({"requests": {"cpu": "100m"}}));
    assert_eq!(
        cm.ensure_pod(&b).unwrap(),
        "/test.slice/test-kubepods.slice/test-kubepods-burstable.slice/test-kubepods-burstable-pod1_2.slice"
    );
    assert_eq!(
        read(
            dir.path()
                .join("cpu/test.slice/test-kubepods.slice/cpu.shares")
        ),
        "1536"
    );
}

#[test]
fn existing_kubepods_keeps_its_limits_until_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(CgroupfsV1::at(dir.path()));
    // Pods already run under kubepods and use more memory than the new limit.
    fs.create("/kubepods").unwrap();
    let usage = dir.path().join("memory/kubepods/memory.usage_in_bytes");
    std::fs::write(&usage, (4u64 << 30).to_string()).unwrap();
    let limit = dir.path().join("memory/kubepods/memory.limit_in_bytes");
    std::fs::write(&limit, "9223372036854771712").unwrap();
    let cm = ContainerManager::new(fs, &config(), &capacity());
    cm.start().unwrap();
    let err = cm.enforce_node_allocatable().unwrap_err();
    assert!(matches!(err, CgroupError::MemoryBelowUsage { .. }), "{err}");
    assert_eq!(
        read(limit.clone()),
        "9223372036854771712",
        "no OOM kill at start-up"
    );
    assert_eq!(read(dir.path().join("cpu/kubepods/cpu.shares")), "1536");
    // Once usage fell below it (evictions, pods ending), the limit goes on.
    std::fs::write(&usage, (1u64 << 30).to_string()).unwrap();
    cm.enforce_node_allocatable().unwrap();
    assert_eq!(read(limit), ((4i64 << 30) - (512 << 20)).to_string());
}

#[test]
fn reserved_cgroups_must_exist_and_get_the_reservation() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(CgroupfsV1::at(dir.path()));
    let mut cfg = config();
    cfg.enforce_node_allocatable = vec!["pods".into(), "kube-reserved".into()];
    cfg.kube_reserved_cgroup = "/kube".into();
    let cm = ContainerManager::new(fs.clone(), &cfg, &capacity());
    cm.start().unwrap();
    assert!(
        cm.enforce_node_allocatable().is_err(),
        "no /kube cgroup yet"
    );
    fs.create("/kube").unwrap();
    cm.enforce_node_allocatable().unwrap();
    assert_eq!(
        read(dir.path().join("memory/kube/memory.limit_in_bytes")),
        (512 << 20).to_string()
    );
}

#[test]
fn without_cgroups_per_qos_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.cgroups_per_qos = false;
    cfg.enforce_node_allocatable = Vec::new();
    let cm = ContainerManager::new(Arc::new(CgroupfsV1::at(dir.path())), &cfg, &capacity());
    cm.start().unwrap();
    let p = pod(
        "u",
        serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
    );
    assert_eq!(cm.ensure_pod(&p).unwrap(), "/podu");
    assert_eq!(
        std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}
