//! Whole-pod tests: setup, mounts and teardown together, with a fake mounter; and the
//! real tmpfs path when running as root.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::fetch::Fetched;
use super::mounter::FakeMounter;
use super::*;

fn pod(volumes: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "u-1",
                     "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}],
            "volumes": volumes
        }
    }))
    .unwrap()
}

fn ctx() -> DownwardContext {
    DownwardContext {
        node_name: "node-1".into(),
        host_ip: "10.0.0.1".into(),
        pod_ips: vec!["10.88.0.2".into()],
        allocatable: Allocatable {
            cpu_millis: Some(2000),
            memory_bytes: Some(4 << 30),
            ephemeral_storage_bytes: None,
        },
    }
}

fn all_kinds(host: &Path) -> serde_json::Value {
    json!([
        {"name": "scratch", "emptyDir": {}},
        {"name": "defaulted"},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "host", "hostPath": {"path": host, "type": "DirectoryOrCreate"}},
        {"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "mem_limit", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}
        ]}},
        {"name": "proj", "projected": {"defaultMode": 0o440, "sources": [
            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"downwardAPI": {"items": [{"path": "ns/namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
        ]}}
    ])
}

#[test]
fn every_kind_lands_where_upstream_puts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pods/u-1");
    let host = tmp.path().join("host/data");
    let m = FakeMounter::default();
    let p = pod(all_kinds(&host));
    let v = setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    let vols = pod_dir.join("volumes");

    let scratch = v.get("scratch").unwrap();
    assert_eq!(scratch.path, vols.join("kubernetes.io~empty-dir/scratch"));
    assert_eq!(scratch.kind, VolumeKind::EmptyDir);
    assert_eq!(
        fs::metadata(&scratch.path).unwrap().permissions().mode() & 0o7777,
        0o777
    );
    assert_eq!(v.get("defaulted").unwrap().kind, VolumeKind::EmptyDir);

    let mem = v.get("mem").unwrap();
    assert_eq!(mem.kind, VolumeKind::EmptyDirMemory);
    let calls = m.calls.lock().unwrap().clone();
    let mem_call = calls.iter().find(|(p, _)| *p == mem.path).unwrap();
    assert_eq!(mem_call.1, vec![format!("size={}", 16 << 20)]);
    // downwardAPI and projected sit on tmpfs sized by the pod's memory limit.
    let info = v.get("info").unwrap();
    assert_eq!(info.path, vols.join("kubernetes.io~downward-api/info"));
    assert!(info.read_only);
    let info_call = calls.iter().find(|(p, _)| *p == info.path).unwrap();
    assert_eq!(info_call.1, vec![format!("size={}", 64 << 20)]);

    assert_eq!(v.get("host").unwrap().path, host);
    assert!(host.is_dir());

    assert_eq!(
        fs::read_to_string(info.path.join("labels")).unwrap(),
        "app=\"web\"\ntier=\"front\""
    );
    assert_eq!(
        fs::read_to_string(info.path.join("mem_limit")).unwrap(),
        "64"
    );
    let proj = v.get("proj").unwrap();
    assert_eq!(proj.path, vols.join("kubernetes.io~projected/proj"));
    assert_eq!(fs::read_to_string(proj.path.join("name")).unwrap(), "web");
    assert_eq!(
        fs::read_to_string(proj.path.join("ns/namespace")).unwrap(),
        "ns"
    );
    let mode = fs::metadata(proj.path.join("name"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o440);
    assert_eq!(v.pod(), "web_ns(u-1)");
}

#[test]
fn setup_again_reuses_and_updates_downward_files() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pod");
    let host = tmp.path().join("host");
    let m = FakeMounter::default();
    let mut p = pod(all_kinds(&host));
    let v1 = setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    let scratch = v1.get("scratch").unwrap().path.clone();
    fs::write(scratch.join("keep"), "x").unwrap();
    let info = v1.get("info").unwrap().path.clone();
    let version = fs::read_link(info.join("..data")).unwrap();
    let mounts = m.calls.lock().unwrap().len();

    let v2 = setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    assert_eq!(v1, v2);
    assert_eq!(m.calls.lock().unwrap().len(), mounts, "no second tmpfs");
    assert_eq!(fs::read_link(info.join("..data")).unwrap(), version);
    assert_eq!(fs::read_to_string(scratch.join("keep")).unwrap(), "x");

    p.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "back".into());
    setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    assert_ne!(fs::read_link(info.join("..data")).unwrap(), version);
    assert_eq!(
        fs::read_to_string(info.join("labels")).unwrap(),
        "app=\"web\"\ntier=\"back\""
    );
}

#[test]
fn unsupported_and_invalid_volumes_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let m = FakeMounter::default();
    let err = |vols: serde_json::Value| {
        setup(&pod(vols), tmp.path(), &ctx(), &Fetched::default(), &m)
            .unwrap_err()
            .to_string()
    };
    let e = err(json!([{"name": "bundle", "projected": {"sources": [
        {"clusterTrustBundle": {"path": "ca.pem", "name": "b"}}]}}]));
    assert!(
        e.contains("volume \"bundle\"")
            && e.contains("projected.sources[0].clusterTrustBundle")
            && e.contains("not implemented"),
        "{e}"
    );
    let e = err(json!([{"name": "claim", "persistentVolumeClaim": {"claimName": "c"}}]));
    assert!(e.contains("kind persistentVolumeClaim"), "{e}");
    let e = err(json!([{"name": "s", "secret": {}}]));
    assert!(e.contains("secret.secretName: is required"), "{e}");
    let e = err(json!([{"name": "c", "configMap": {"name": "x", "defaultMode": 0o1777}}]));
    assert!(e.contains("configMap.defaultMode"), "{e}");
    let e = err(json!([{"name": "../x", "emptyDir": {}}]));
    assert!(e.contains("not a valid volume name"), "{e}");
    let e = err(json!([{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]));
    assert!(e.contains("duplicate"), "{e}");
    let e = err(json!([{"name": "h", "hostPath": {"path": "/dev/null", "type": "Directory"}}]));
    assert!(
        e.contains("MountVolume.SetUp failed for volume \"h\"")
            && e.contains("hostPath type check failed: /dev/null is not a directory"),
        "{e}"
    );
    let e = err(json!([{"name": "d", "downwardAPI": {"items": [
        {"path": "../x", "fieldRef": {"fieldPath": "metadata.name"}}]}}]));
    assert!(e.contains("downwardAPI.items[0].path"), "{e}");
    let e = err(json!([{"name": "e", "emptyDir": {"medium": "HugePages"}}]));
    assert!(e.contains("HugePages"), "{e}");
}

#[test]
fn teardown_after_setup_leaves_host_path_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pod");
    let host = tmp.path().join("host");
    let m = FakeMounter::default();
    let p = pod(all_kinds(&host));
    let v = setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    fs::write(host.join("precious"), "keep").unwrap();
    // A container's link from its emptyDir to the hostPath must not lead the removal there.
    std::os::unix::fs::symlink(&host, v.get("scratch").unwrap().path.join("h")).unwrap();
    teardown::teardown(&pod_dir, &m).unwrap();
    assert!(!pod_dir.join("volumes").exists());
    assert!(m.mounted.lock().unwrap().is_empty());
    assert_eq!(fs::read_to_string(host.join("precious")).unwrap(), "keep");
    teardown::teardown(&pod_dir, &m).unwrap();
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Real tmpfs: mounted with its size, kept (with data) across a second setup, unmounted
/// and removed by teardown. Needs root (CAP_SYS_ADMIN).
#[tokio::test]
#[ignore = "needs root: run hack/test.sh"]
async fn real_tmpfs_lifecycle_as_root() {
    assert!(is_root(), "mounting a tmpfs needs root");
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pod");
    let p = pod(json!([
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
        {"name": "info", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}
    ]));
    let v = setup_pod_volumes(&p, &pod_dir, &ctx(), &crate::objects::Standalone)
        .await
        .unwrap();
    let mem = v.get("mem").unwrap().path.clone();
    let info = v.get("info").unwrap().path.clone();
    let sys = SysMounter;
    assert_eq!(sys.mounted_fs(&mem).unwrap().as_deref(), Some("tmpfs"));
    assert_eq!(sys.mounted_fs(&info).unwrap().as_deref(), Some("tmpfs"));
    let st = nix::sys::statvfs::statvfs(&mem).unwrap();
    assert_eq!(st.blocks() as u64 * st.fragment_size() as u64, 8 << 20);
    assert_eq!(fs::read_to_string(info.join("name")).unwrap(), "web");

    fs::write(mem.join("data"), "in memory").unwrap();
    setup_pod_volumes(&p, &pod_dir, &ctx(), &crate::objects::Standalone)
        .await
        .unwrap();
    let real = fs::canonicalize(&mem).unwrap();
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let stacked = mounter::parse_mountinfo(&table)
        .into_iter()
        .filter(|(pt, _)| *pt == real)
        .count();
    assert_eq!(stacked, 1, "second setup must not mount again");
    assert_eq!(fs::read_to_string(mem.join("data")).unwrap(), "in memory");

    teardown_pod_volumes(&pod_dir).await.unwrap();
    assert_eq!(sys.mounted_fs(&mem).unwrap(), None);
    assert!(!pod_dir.join("volumes").exists());
    teardown_pod_volumes(&pod_dir).await.unwrap();
}
