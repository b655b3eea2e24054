//! Whole-pod tests: setup, mounts and teardown together, with a fake mounter; and the
//! real tmpfs path when running as root.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// The 0777 emptyDir folders and world-readable files sit below folders other users of the
/// node cannot enter: the pod's volumes dir and each plugin's dir are 0750, as upstream's,
/// and one left wider by an older version is tightened.
#[test]
fn volume_folders_are_closed_to_other_users() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pods/u-1");
    let host = tmp.path().join("host/data");
    let m = FakeMounter::default();
    let p = pod(all_kinds(&host));
    setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    let vols = pod_dir.join("volumes");
    let private = |d: &Path| {
        let mode = mode_of(d);
        assert_eq!(mode & 0o027, 0, "{} is {mode:o}", d.display());
    };
    private(&vols);
    for plugin in [EMPTY_DIR_PLUGIN, DOWNWARD_API_PLUGIN, PROJECTED_PLUGIN] {
        private(&vols.join(plugin));
    }
    fs::set_permissions(
        vols.join(EMPTY_DIR_PLUGIN),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    setup(&p, &pod_dir, &ctx(), &Fetched::default(), &m).unwrap();
    private(&vols.join(EMPTY_DIR_PLUGIN));
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
    assert!(
        e.contains("volume \"claim\": error processing PVC ns/c"),
        "{e}"
    );
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
    let v = setup_pod_volumes(
        &p,
        &pod_dir,
        &ctx(),
        &crate::objects::Standalone,
        &Default::default(),
    )
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
    setup_pod_volumes(
        &p,
        &pod_dir,
        &ctx(),
        &crate::objects::Standalone,
        &Default::default(),
    )
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

    teardown_pod_volumes(&pod_dir, &Default::default())
        .await
        .unwrap();
    assert_eq!(sys.mounted_fs(&mem).unwrap(), None);
    assert!(!pod_dir.join("volumes").exists());
    teardown_pod_volumes(&pod_dir, &Default::default())
        .await
        .unwrap();
}

// configMap, secret and projected volumes over the objects seam (FakeObjects).

use crate::objects::fake::FakeObjects;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use std::os::unix::fs::MetadataExt;

fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "data": data}))
        .unwrap()
}

fn secret(name: &str, data: serde_json::Value) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "data": data}))
        .unwrap()
}

/// What the apiserver's service-account admission adds to every pod.
fn kube_api_access() -> serde_json::Value {
    json!({"name": "kube-api-access-x1", "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]}})
}

fn cluster_objects() -> FakeObjects {
    let o = FakeObjects::default();
    o.put_config_map(config_map("kube-root-ca.crt", json!({"ca.crt": "CA"})));
    o.put_config_map(config_map("cfg", json!({"app.conf": "x=1", "extra": "e"})));
    // "hunter2" and "admin"
    o.put_secret(secret(
        "creds",
        json!({"password": "aHVudGVyMg==", "user": "YWRtaW4="}),
    ));
    o
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

async fn set_up(
    p: &Pod,
    pod_dir: &Path,
    objects: &FakeObjects,
    m: &Arc<FakeMounter>,
) -> Result<PodVolumes, VolumeError> {
    let m: Arc<dyn Mounter> = m.clone();
    setup_with(p, pod_dir, &ctx(), objects, &Default::default(), m).await
}

#[tokio::test]
async fn cluster_volumes_land_where_upstream_puts_them_with_their_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pod");
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let p = pod(json!([
        {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o440,
            "items": [{"key": "app.conf", "path": "conf/app.conf"},
                      {"key": "extra", "path": "extra", "mode": 0o600}]}},
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        kube_api_access()
    ]));
    let v = set_up(&p, &pod_dir, &objects, &m).await.unwrap();
    let vols = pod_dir.join("volumes");

    let cfg = v.get("cfg").unwrap();
    assert_eq!(cfg.path, vols.join("kubernetes.io~configmap/cfg"));
    assert_eq!((cfg.kind, cfg.read_only), (VolumeKind::ConfigMap, true));
    assert_eq!(
        fs::read_to_string(cfg.path.join("conf/app.conf")).unwrap(),
        "x=1"
    );
    assert_eq!(mode_of(&cfg.path.join("conf/app.conf")), 0o440);
    assert_eq!(mode_of(&cfg.path.join("extra")), 0o600);

    let creds = v.get("creds").unwrap();
    assert_eq!(creds.path, vols.join("kubernetes.io~secret/creds"));
    assert_eq!(
        fs::read_to_string(creds.path.join("password")).unwrap(),
        "hunter2"
    );
    assert_eq!(
        fs::read_to_string(creds.path.join("user")).unwrap(),
        "admin"
    );
    assert_eq!(mode_of(&creds.path.join("password")), 0o400);

    let api = v.get("kube-api-access-x1").unwrap();
    assert_eq!(
        api.path,
        vols.join("kubernetes.io~projected/kube-api-access-x1")
    );
    assert_eq!(
        fs::read_to_string(api.path.join("token")).unwrap(),
        "token-default-1"
    );
    assert_eq!(fs::read_to_string(api.path.join("ca.crt")).unwrap(), "CA");
    assert_eq!(
        fs::read_to_string(api.path.join("namespace")).unwrap(),
        "ns"
    );
    for f in ["token", "ca.crt", "namespace"] {
        assert_eq!(mode_of(&api.path.join(f)), 0o644, "{f}");
    }
    let asked = objects.tokens.lock().unwrap().clone();
    assert_eq!(
        asked,
        [crate::objects::TokenSpec {
            service_account: "default".into(),
            audience: String::new(),
            expiration_seconds: 3607,
        }]
    );

    // The secret and the projected volume sit on tmpfs; the configMap on disk.
    let mounted = m.mounted.lock().unwrap().clone();
    assert!(mounted.contains(&creds.path) && mounted.contains(&api.path));
    assert!(!mounted.contains(&cfg.path));
}

#[tokio::test]
async fn missing_objects_and_keys_stop_the_volume_with_upstreams_words() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let fail = |vols: serde_json::Value| {
        let (tmp, m, objects) = (&tmp, &m, &objects);
        async move {
            set_up(&pod(vols), tmp.path(), objects, m)
                .await
                .unwrap_err()
        }
    };
    let e = fail(json!([{"name": "cfg", "configMap": {"name": "absent"}}])).await;
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"absent\" not found"
    );
    assert_eq!(e.waiting_reason(), "ContainerCreating");
    assert!(
        !e.is_transient(),
        "a missing object waits for someone to create it"
    );
    assert!(e.to_string().contains("web_ns(u-1)"), "{e}");
    assert!(
        !tmp.path()
            .join("volumes/kubernetes.io~configmap/cfg")
            .exists(),
        "nothing is made for a volume whose object is missing"
    );
    let e = fail(json!([{"name": "s", "secret": {"secretName": "absent"}}])).await;
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"s\" : secret \"absent\" not found"
    );
    let e = fail(json!([{"name": "cfg", "configMap": {"name": "cfg",
        "items": [{"key": "nope", "path": "n"}]}}]))
    .await;
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap references non-existent config key: nope"
    );
    let e = fail(json!([{"name": "s", "secret": {"secretName": "creds",
        "items": [{"key": "nope", "path": "n"}]}}]))
    .await;
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"s\" : references non-existent secret key: nope"
    );
    // Every failing source of a projected volume at once, as upstream's aggregate.
    let e = fail(json!([{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "gone"}},
        {"secret": {"name": "creds", "items": [{"key": "nope", "path": "n"}]}},
        {"secret": {"name": "lost"}}
    ]}}]))
    .await;
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"p\" : [configmap \"gone\" not found, \
         references non-existent secret key: nope, secret \"lost\" not found]"
    );
}

#[tokio::test]
async fn optional_references_give_what_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let p = pod(json!([
        {"name": "gone", "configMap": {"name": "absent", "optional": true}},
        {"name": "some", "configMap": {"name": "cfg", "optional": true,
            "items": [{"key": "nope", "path": "n"}, {"key": "extra", "path": "e"}]}},
        {"name": "s", "secret": {"secretName": "absent", "optional": true}},
        {"name": "p", "projected": {"sources": [
            {"secret": {"name": "absent", "optional": true}},
            {"configMap": {"name": "cfg", "items": [{"key": "extra", "path": "e"}]}}
        ]}}
    ]));
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    let names = |vol: &str| -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(&v.get(vol).unwrap().path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with(".."))
            .collect();
        n.sort();
        n
    };
    assert!(
        names("gone").is_empty(),
        "a missing optional object: an empty volume"
    );
    assert!(names("s").is_empty());
    assert_eq!(names("some"), ["e"]);
    assert_eq!(names("p"), ["e"]);
}

#[tokio::test]
async fn fs_group_owns_the_files_and_keeps_the_token_private() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let gid = crate::test_support::test_gid();
    let uid = nix::unistd::geteuid().as_raw();
    let mut p = pod(json!([
        {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o400}},
        kube_api_access()
    ]));
    let spec = p.spec.as_mut().unwrap();
    spec.security_context =
        Some(serde_json::from_value(json!({"fsGroup": gid, "runAsUser": uid})).unwrap());
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();

    let cfg = &v.get("cfg").unwrap().path;
    let f = cfg.join("app.conf");
    assert_eq!(mode_of(&f), 0o440, "0400 plus group read");
    assert_eq!(fs::metadata(&f).unwrap().gid(), gid);
    assert_eq!(mode_of(cfg) & 0o2000, 0o2000, "setgid root");
    assert_eq!(fs::metadata(cfg).unwrap().gid(), gid);

    let api = &v.get("kube-api-access-x1").unwrap().path;
    let token = fs::metadata(api.join("token")).unwrap();
    assert_eq!(token.permissions().mode() & 0o7777, 0o640);
    assert_eq!((token.uid(), token.gid()), (uid, gid));
    assert_eq!(mode_of(&api.join("ca.crt")), 0o644);
}

/// As upstream's emptyDir SetUpAt: the pod's fsGroup on the new folder (disk or tmpfs), with
/// setgid so what the containers write keeps the group; once, so a later pass leaves the
/// modes the containers gave their files.
#[tokio::test]
async fn an_empty_dir_gets_the_fs_group_and_setgid_once() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let gid = crate::test_support::test_gid();
    let mut p = pod(json!([
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory"}}
    ]));
    p.spec.as_mut().unwrap().security_context =
        Some(serde_json::from_value(json!({"fsGroup": gid})).unwrap());
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    for name in ["scratch", "mem"] {
        let dir = &v.get(name).unwrap().path;
        assert_eq!(mode_of(dir), 0o2777, "{name}");
        assert_eq!(fs::metadata(dir).unwrap().gid(), gid, "{name}");
    }

    let scratch = &v.get("scratch").unwrap().path;
    let written = scratch.join("private");
    fs::write(&written, "x").unwrap();
    fs::set_permissions(&written, fs::Permissions::from_mode(0o600)).unwrap();
    set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    assert_eq!(mode_of(&written), 0o600, "not walked again");
}

#[tokio::test]
async fn changed_objects_and_renewed_tokens_are_rewritten_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let p = pod(json!([
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "creds", "secret": {"secretName": "creds"}},
        kube_api_access()
    ]));
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    let version = |vol: &str| fs::read_link(v.get(vol).unwrap().path.join("..data")).unwrap();
    let (cfg1, creds1, api1) = (
        version("cfg"),
        version("creds"),
        version("kube-api-access-x1"),
    );

    objects.put_config_map(config_map("cfg", json!({"app.conf": "x=2", "extra": "e"})));
    set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    let cfg = &v.get("cfg").unwrap().path;
    assert_eq!(fs::read_to_string(cfg.join("app.conf")).unwrap(), "x=2");
    assert_ne!(version("cfg"), cfg1);
    assert_eq!(
        version("creds"),
        creds1,
        "an unchanged secret is not rewritten"
    );
    // The fake issues a new token on every request: the projected volume follows it.
    let api = &v.get("kube-api-access-x1").unwrap().path;
    assert_eq!(
        fs::read_to_string(api.join("token")).unwrap(),
        "token-default-2"
    );
    assert_ne!(version("kube-api-access-x1"), api1);

    // A key removed from the object disappears from the volume.
    objects.put_config_map(config_map("cfg", json!({"app.conf": "x=2"})));
    set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    assert!(fs::symlink_metadata(cfg.join("extra")).is_err());
}

/// A subPath mount is bound to the file of the version current when the container starts,
/// not to the `..data` link, so later versions do not reach it (upstream's rule), while a
/// mount of the whole volume sees every version.
#[tokio::test]
async fn sub_path_mounts_keep_the_version_they_started_with() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let p = pod(json!([{"name": "cfg", "configMap": {"name": "cfg"}}]));
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    let c: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({
        "name": "c", "image": "i", "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"}]}))
    .unwrap();
    let mounts = mounts::container_mounts_with(&c, &v, &[], &*m).unwrap();
    let whole = PathBuf::from(mounts[0].source().as_ref().unwrap());
    let target = PathBuf::from(mounts[1].source().as_ref().unwrap());
    assert_eq!(
        target,
        tmp.path().join("volume-subpaths/cfg/c/1"),
        "runc gets the agent's bind target"
    );
    let sub = m.binds.lock().unwrap()[0].0.clone();
    let version = fs::read_link(v.get("cfg").unwrap().path.join("..data")).unwrap();
    assert_eq!(
        whole,
        fs::canonicalize(&v.get("cfg").unwrap().path).unwrap()
    );
    assert!(
        sub.starts_with(whole.join(&version)),
        "{sub:?} in {version:?}"
    );
    // What the bind mount holds: the open file of that version.
    let bound = fs::File::open(&sub).unwrap();

    objects.put_config_map(config_map("cfg", json!({"app.conf": "x=2", "extra": "e"})));
    set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    assert_eq!(fs::read_to_string(whole.join("app.conf")).unwrap(), "x=2");
    let mut old = String::new();
    std::io::Read::read_to_string(&mut &bound, &mut old).unwrap();
    assert_eq!(old, "x=1");
}

#[tokio::test]
async fn only_a_failed_read_is_retried_soon() {
    let tmp = tempfile::tempdir().unwrap();
    let p = pod(json!([{"name": "cfg", "configMap": {"name": "cfg"}}]));
    let m: Arc<dyn Mounter> = Arc::new(FakeMounter::default());
    let standalone = setup_with(
        &p,
        tmp.path(),
        &ctx(),
        &crate::objects::Standalone,
        &Default::default(),
        m,
    )
    .await
    .unwrap_err();
    assert!(
        standalone.event_message().starts_with(
            "MountVolume.SetUp failed for volume \"cfg\" : cannot get configmap ns/cfg"
        ),
        "{standalone}"
    );
    assert!(!standalone.is_transient(), "no apiserver will not change");
    let unreadable = VolumeError::Object {
        pod: "web_ns(u-1)".into(),
        volume: "cfg".into(),
        source: Arc::new(ObjectError::Api {
            kind: ObjectKind::ConfigMap,
            namespace: "ns".into(),
            name: "cfg".into(),
            source: kube::Error::Service("connection refused".into()),
        }),
    };
    assert!(unreadable.is_transient(), "{unreadable}");
    let bad = setup(
        &pod(json!([{"name": "s", "secret": {}}])),
        tmp.path(),
        &ctx(),
        &Fetched::default(),
        &FakeMounter::default(),
    )
    .unwrap_err();
    assert!(!bad.is_transient(), "{bad}");
}

/// A volume set up before whose object goes away (or whose refresh fails) keeps its last
/// content and is reported, so the running pod is left alone; a new volume still fails.
#[tokio::test]
async fn a_failed_refresh_keeps_the_last_content() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let p = pod(json!([
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "creds", "secret": {"secretName": "creds"}}
    ]));
    let v = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    assert!(v.stale().is_empty());
    let cfg = v.get("cfg").unwrap().path.clone();

    objects.remove_config_map("ns", "cfg");
    let again = set_up(&p, tmp.path(), &objects, &m).await.unwrap();
    assert_eq!(again.get("cfg"), v.get("cfg"));
    assert_eq!(fs::read_to_string(cfg.join("app.conf")).unwrap(), "x=1");
    assert_eq!(
        again.stale(),
        [StaleVolume {
            volume: "cfg".into(),
            event_message: "MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"
                .into(),
            error: "pod web_ns(u-1): MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"
                .into(),
        }]
    );

    // Another pod dir: nothing set up before, so the same spec fails.
    let fresh = tmp.path().join("other");
    let e = set_up(&p, &fresh, &objects, &m).await.unwrap_err();
    assert!(
        e.event_message().ends_with("configmap \"cfg\" not found"),
        "{e}"
    );
}

#[tokio::test]
async fn a_token_source_asks_for_its_audience_lifetime_and_the_pods_service_account() {
    let tmp = tempfile::tempdir().unwrap();
    let m = Arc::new(FakeMounter::default());
    let objects = cluster_objects();
    let mut p = pod(json!([
        {"name": "vault", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 7200,
                                     "path": "vault-token"}}
        ]}}
    ]));
    p.spec.as_mut().unwrap().service_account_name = Some("builder".into());
    let v = set_up(&p, &tmp.path().join("pod"), &objects, &m)
        .await
        .unwrap();
    let path = v.get("vault").unwrap().path.join("vault-token");
    assert_eq!(fs::read_to_string(path).unwrap(), "token-builder-1");
    assert_eq!(
        objects.tokens.lock().unwrap().clone(),
        [crate::objects::TokenSpec {
            service_account: "builder".into(),
            audience: "vault".into(),
            expiration_seconds: 7200,
        }]
    );
}
