//! Claim-backed volumes over fake cluster objects and a fake mounter: a claim is followed
//! to its bound volume only when upstream's volume manager would follow it, with its words
//! when it does not; local volumes are bound into the pod's dir (read-only as the claim
//! says), hostPath volumes used in place, node affinity checked, other sources refused.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use serde_json::{json, Value};

use super::fetch::fetch;
use super::mounter::FakeMounter;
use super::*;
use crate::objects::fake::FakeObjects;

fn pod(volumes: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "ns", "uid": "pod-uid"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes}
    }))
    .unwrap()
}

fn claim(name: &str, phase: &str, volume: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"volumeName": volume},
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn volume(name: &str, claim_uid: &str, source: Value) -> PersistentVolume {
    let mut spec = json!({"claimRef": {"name": "data", "namespace": "ns", "uid": claim_uid},
                          "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
    for (k, v) in source.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn objects(claims: Vec<PersistentVolumeClaim>, volumes: Vec<PersistentVolume>) -> FakeObjects {
    let o = FakeObjects::default();
    for c in claims {
        let key = (
            c.metadata.namespace.clone().unwrap(),
            c.metadata.name.clone().unwrap(),
        );
        o.claims.lock().unwrap().insert(key, Arc::new(c));
    }
    for v in volumes {
        let key = v.metadata.name.clone().unwrap();
        o.volumes.lock().unwrap().insert(key, Arc::new(v));
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1"}}
    }))
    .unwrap();
    o.nodes
        .lock()
        .unwrap()
        .insert("node-1".into(), Arc::new(node));
    o
}

fn ctx() -> DownwardContext {
    DownwardContext {
        node_name: "node-1".into(),
        ..Default::default()
    }
}

async fn set_up(
    pod: &Pod,
    dir: &Path,
    o: &FakeObjects,
    m: &FakeMounter,
) -> Result<PodVolumes, VolumeError> {
    let fetched = fetch(pod, "node-1", o).await;
    setup(pod, dir, &ctx(), &fetched, m)
}

fn data_claim(read_only: bool) -> Value {
    json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": read_only}}])
}

#[tokio::test]
async fn a_claim_not_bound_waits_with_upstreams_words() {
    let tmp = tempfile::tempdir().unwrap();
    let m = FakeMounter::default();
    let pod = pod(data_claim(false));

    let none = objects(vec![], vec![]);
    let e = set_up(&pod, tmp.path(), &none, &m).await.unwrap_err();
    assert!(
        e.event_message().ends_with(
            "error processing PVC ns/data: failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
        ),
        "{}",
        e.event_message()
    );

    let pending = objects(vec![claim("data", "Pending", "")], vec![]);
    let e = set_up(&pod, tmp.path(), &pending, &m).await.unwrap_err();
    assert_eq!(
        e.event_message(),
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data], \
         failed to process volumes=[data]: error processing PVC ns/data: PVC is not bound"
    );
    assert!(e.is_transient(), "a binding is looked for again soon");
    assert_eq!(e.waiting_reason(), "ContainerCreating");

    let mut deleting = claim("data", "Bound", "pv-1");
    deleting.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    let local = volume("pv-1", "uid-data", json!({"local": {"path": tmp.path()}}));
    let o = objects(vec![deleting], vec![local.clone()]);
    let e = set_up(&pod, tmp.path(), &o, &m).await.unwrap_err();
    assert!(e.to_string().ends_with("PVC is being deleted"), "{e}");

    // Bound, but the volume's claimRef is another claim's (a stale binding).
    let o = objects(
        vec![claim("data", "Bound", "pv-1")],
        vec![volume(
            "pv-1",
            "uid-other",
            json!({"local": {"path": tmp.path()}}),
        )],
    );
    let e = set_up(&pod, tmp.path(), &o, &m).await.unwrap_err();
    assert!(
        e.to_string().ends_with(
            "found PV object pv-1 but its pv.Spec.ClaimRef.UID uid-other does not point to claim.UID uid-data"
        ),
        "{e}"
    );
    assert!(m.binds.lock().unwrap().is_empty(), "nothing was mounted");
}

#[tokio::test]
async fn a_bound_local_volume_is_bound_into_the_pod_dir_read_only_as_the_claim_says() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let pod_dir = tmp.path().join("pod");
    let o = objects(
        vec![claim("data", "Bound", "pv-local")],
        vec![volume(
            "pv-local",
            "uid-data",
            json!({"local": {"path": disk},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}),
        )],
    );

    let m = FakeMounter::default();
    let v = set_up(&pod(data_claim(false)), &pod_dir, &o, &m)
        .await
        .unwrap();
    let hv = v.get("data").unwrap();
    let at = pod_dir.join("volumes/kubernetes.io~local-volume/pv-local");
    assert_eq!(
        (hv.path.clone(), hv.read_only, hv.kind),
        (at.clone(), false, VolumeKind::Local)
    );
    assert_eq!(*m.binds.lock().unwrap(), vec![(disk.clone(), at.clone())]);
    assert!(m.read_only.lock().unwrap().is_empty());
    // Again (every sync, or after an agent restart): the mount is kept, not made twice.
    set_up(&pod(data_claim(false)), &pod_dir, &o, &m)
        .await
        .unwrap();
    assert_eq!(m.binds.lock().unwrap().len(), 1);

    let m = FakeMounter::default();
    let pod_dir = tmp.path().join("pod-ro");
    let v = set_up(&pod(data_claim(true)), &pod_dir, &o, &m)
        .await
        .unwrap();
    assert!(v.get("data").unwrap().read_only);
    let at = pod_dir.join("volumes/kubernetes.io~local-volume/pv-local");
    assert!(m.read_only.lock().unwrap().contains(&at));
}

/// The pod's fsGroup on a writable local volume's first mount, under its
/// fsGroupChangePolicy; a policy the API does not know is refused naming the pod and field,
/// before anything is mounted.
#[tokio::test]
async fn a_local_volume_gets_the_fs_group_and_an_unknown_policy_is_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let o = objects(
        vec![claim("data", "Bound", "pv-local")],
        vec![volume(
            "pv-local",
            "uid-data",
            json!({"local": {"path": disk},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}}),
        )],
    );
    let gid = crate::test_support::test_gid();
    let with_policy = |policy: &str| {
        let mut p = pod(data_claim(false));
        p.spec.as_mut().unwrap().security_context = Some(
            serde_json::from_value(json!({"fsGroup": gid, "fsGroupChangePolicy": policy})).unwrap(),
        );
        p
    };

    let m = FakeMounter::default();
    let pod_dir = tmp.path().join("pod");
    let e = set_up(&with_policy("Sometimes"), &pod_dir, &o, &m)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, VolumeError::Invalid { pod, field, .. }
            if pod == "db_ns(pod-uid)" && field == "securityContext.fsGroupChangePolicy"),
        "{e}"
    );
    assert!(e.to_string().contains("\"Sometimes\""), "{e}");
    assert!(m.binds.lock().unwrap().is_empty(), "nothing mounted");

    // The fake mounter binds nothing: the walk sees the mount point folder itself.
    let v = set_up(&with_policy("OnRootMismatch"), &pod_dir, &o, &m)
        .await
        .unwrap();
    let at = &v.get("data").unwrap().path;
    let meta = std::fs::metadata(at).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o2777);
    assert_eq!(meta.gid(), gid);
}

#[tokio::test]
async fn a_volume_for_another_node_is_refused_at_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let o = objects(
        vec![claim("data", "Bound", "pv-away")],
        vec![volume(
            "pv-away",
            "uid-data",
            json!({"local": {"path": tmp.path()},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}]}]}}}),
        )],
    );
    let m = FakeMounter::default();
    let e = set_up(&pod(data_claim(false)), tmp.path(), &o, &m)
        .await
        .unwrap_err();
    assert_eq!(
        e.event_message(),
        "MountVolume.NodeAffinity check failed for volume \"pv-away\" : no matching NodeSelectorTerms"
    );
    assert!(m.binds.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_host_path_volume_is_used_in_place_and_other_sources_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("made");
    let o = objects(
        vec![claim("data", "Bound", "pv-host")],
        vec![volume(
            "pv-host",
            "uid-data",
            json!({"hostPath": {"path": host, "type": "DirectoryOrCreate"}}),
        )],
    );
    let m = FakeMounter::default();
    let v = set_up(&pod(data_claim(true)), tmp.path(), &o, &m)
        .await
        .unwrap();
    let hv = v.get("data").unwrap();
    assert_eq!((hv.path.clone(), hv.read_only), (host.clone(), true));
    assert!(host.is_dir(), "DirectoryOrCreate made it");

    let o = objects(
        vec![claim("data", "Bound", "pv-nfs")],
        vec![volume(
            "pv-nfs",
            "uid-data",
            json!({"nfs": {"server": "nfs.example", "path": "/export"}}),
        )],
    );
    let e = set_up(&pod(data_claim(false)), tmp.path(), &o, &m)
        .await
        .unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("volume \"pv-nfs\"")
            && e.contains("persistentVolume.nfs")
            && e.contains("not supported by this node agent"),
        "{e}"
    );
}

#[tokio::test]
async fn an_ephemeral_volume_uses_its_pods_own_claim_only() {
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let vols = json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]);
    let mut pvc = claim("db-scratch", "Bound", "pv-e");
    let pv = volume("pv-e", "uid-db-scratch", json!({"local": {"path": disk}}));

    let o = objects(vec![pvc.clone()], vec![pv.clone()]);
    let m = FakeMounter::default();
    let e = set_up(&pod(vols.clone()), tmp.path(), &o, &m)
        .await
        .unwrap_err();
    assert!(
        e.to_string().ends_with(
            "error processing PVC ns/db-scratch: PVC ns/db-scratch was not created for pod ns/db (pod is not owner)"
        ),
        "{e}"
    );

    pvc.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "name": "db", "uid": "pod-uid", "controller": true
    }))
    .unwrap()]);
    let o = objects(vec![pvc], vec![pv]);
    let v = set_up(&pod(vols), tmp.path(), &o, &m).await.unwrap();
    assert_eq!(v.get("scratch").unwrap().kind, VolumeKind::Local);
}

#[tokio::test]
async fn a_block_volume_needs_volume_devices_and_only_local_and_csi_serve_it() {
    let tmp = tempfile::tempdir().unwrap();
    let m = FakeMounter::default();
    let mounted: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "ns", "uid": "pod-uid"},
        "spec": {"containers": [{"name": "c", "image": "i",
                                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                 "volumes": data_claim(false)}
    }))
    .unwrap();
    let local = volume(
        "pv-raw",
        "uid-data",
        json!({"volumeMode": "Block", "local": {"path": "/dev/null"}}),
    );
    let o = objects(vec![claim("data", "Bound", "pv-raw")], vec![local]);
    let e = set_up(&mounted, tmp.path(), &o, &m).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "pod db_ns(pod-uid): container \"c\": volume \"data\": volume data has volumeMode Block, but is specified in volumeMounts"
    );
    assert!(m.binds.lock().unwrap().is_empty(), "nothing mapped");

    let mut device = mounted.clone();
    let c = &mut device.spec.as_mut().unwrap().containers[0];
    c.volume_mounts = None;
    c.volume_devices = Some(vec![serde_json::from_value(
        json!({"name": "data", "devicePath": "/dev/xvda"}),
    )
    .unwrap()]);
    // /dev/null is a character device: a local block PV must be a block device.
    let e = set_up(&device, tmp.path(), &o, &m).await.unwrap_err();
    assert_eq!(
        e.event_message(),
        "MapVolume.MapPodDevice failed for volume \"pv-raw\" : local volume path /dev/null is not a block device"
    );

    let host = volume(
        "pv-raw",
        "uid-data",
        json!({"volumeMode": "Block", "hostPath": {"path": "/dev/null"}}),
    );
    let o = objects(vec![claim("data", "Bound", "pv-raw")], vec![host]);
    let e = set_up(&device, tmp.path(), &o, &m).await.unwrap_err();
    assert!(
        e.to_string().ends_with(
            "volume kind persistentVolume.hostPath volumeMode Block is not supported by this node agent \
             (raw block volumes are served from in-tree local and CSI volumes only)"
        ),
        "{e}"
    );

    // A Filesystem volume in volumeDevices.
    let files = volume("pv-raw", "uid-data", json!({"local": {"path": tmp.path()}}));
    let o = objects(vec![claim("data", "Bound", "pv-raw")], vec![files]);
    let e = set_up(&device, tmp.path(), &o, &m).await.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("volume data has volumeMode Filesystem, but is specified in volumeDevices"),
        "{e}"
    );
}
