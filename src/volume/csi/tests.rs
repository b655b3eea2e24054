//! CSI volumes over a driver in memory (served on a unix socket, as a real one), fake cluster
//! objects and a mounter that sees what the driver mounted: upstream's paths, requests and
//! words, and nothing left behind.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use serde_json::{json, Value};

use super::*;
use crate::csi::fake::{serve, FakeDriver};
use crate::csi::proto::csi::node_server::NodeServer;
use crate::csi::Driver;
use crate::objects::fake::FakeObjects;
use crate::volume::mounter::Mounter;
use crate::volume::{setup_with, DownwardContext};

pub(super) const DRIVER: &str = "csi.example.com";

/// Mount points as the fake driver leaves them.
struct SeesDriver(Arc<Mutex<HashSet<PathBuf>>>);

impl Mounter for SeesDriver {
    fn mounted_fs(&self, p: &Path) -> io::Result<Option<String>> {
        Ok(self.0.lock().unwrap().contains(p).then(|| "fake".into()))
    }
    fn mount_tmpfs(&self, p: &Path, _: &[String]) -> io::Result<()> {
        self.0.lock().unwrap().insert(p.to_path_buf());
        Ok(())
    }
    fn unmount(&self, p: &Path) -> io::Result<()> {
        self.0.lock().unwrap().remove(p);
        Ok(())
    }
    fn bind(&self, _: &Path, t: &Path) -> io::Result<()> {
        self.0.lock().unwrap().insert(t.to_path_buf());
        Ok(())
    }
    fn remount_read_only(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn mounts_under(&self, d: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(d))
            .cloned()
            .collect())
    }
    fn lock_device(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
    fn unlock_device(&self, _: &Path) -> io::Result<()> {
        Ok(())
    }
}

pub(super) struct Node {
    _tmp: tempfile::TempDir,
    pub(super) root: PathBuf,
    pub(super) driver: FakeDriver,
    pub(super) host: CsiHost,
    pub(super) objects: FakeObjects,
    pub(super) m: Arc<dyn Mounter>,
    _server: tokio::task::JoinHandle<()>,
}

pub(super) fn node(stage: bool, registered: bool) -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let driver = FakeDriver {
        stage,
        ..FakeDriver::default()
    };
    let sock = root.join("csi.sock");
    let server = serve(&sock, NodeServer::new(driver.clone()));
    let host = CsiHost {
        root_dir: root.clone(),
        node_name: "node-1".into(),
        ..CsiHost::default()
    };
    if registered {
        host.drivers.insert(
            DRIVER,
            Driver {
                endpoint: sock,
                registration: root.join("reg.sock"),
                node_id: "id-1".into(),
                version: "1.0.0".into(),
            },
        );
    }
    let m: Arc<dyn Mounter> = Arc::new(SeesDriver(driver.mounted.clone()));
    Node {
        _tmp: tmp,
        root,
        driver,
        host,
        objects: FakeObjects::default(),
        m,
        _server: server,
    }
}

impl Node {
    pub(super) fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root.join("pods").join(uid)
    }
    pub(super) fn put_claim_and_volume(&self, pv: &str, handle: &str) {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "claim-uid"},
            "spec": {"volumeName": pv}, "status": {"phase": "Bound"}
        }))
        .unwrap();
        let volume: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": pv},
            "spec": {
                "claimRef": {"name": "data", "namespace": "ns", "uid": "claim-uid"},
                "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                "mountOptions": ["noatime"],
                "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4",
                        "volumeAttributes": {"tier": "gold"}}
            }
        }))
        .unwrap();
        self.objects
            .claims
            .lock()
            .unwrap()
            .insert(("ns".into(), "data".into()), Arc::new(claim));
        self.objects
            .volumes
            .lock()
            .unwrap()
            .insert(pv.into(), Arc::new(volume));
    }
    pub(super) fn put_driver(&self, spec: Value) {
        let d: CSIDriver =
            serde_json::from_value(json!({"metadata": {"name": DRIVER}, "spec": spec})).unwrap();
        self.objects
            .csi_drivers
            .lock()
            .unwrap()
            .insert(DRIVER.into(), Arc::new(d));
    }
    pub(super) async fn set_up(&self, pod: &Pod) -> Result<crate::volume::PodVolumes, VolumeError> {
        let uid = pod.metadata.uid.clone().unwrap();
        let ctx = DownwardContext {
            node_name: "node-1".into(),
            ..Default::default()
        };
        setup_with(
            pod,
            &self.pod_dir(&uid),
            &ctx,
            &self.objects,
            &self.host,
            self.m.clone(),
        )
        .await
    }
    pub(super) async fn tear_down(&self, uid: &str) -> Result<(), VolumeError> {
        tear_down(&self.pod_dir(uid), &self.host, self.m.clone()).await
    }
}

fn claim_pod(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("db-{uid}"), "namespace": "ns", "uid": uid},
        "spec": {
            "serviceAccountName": "sa",
            "securityContext": {"fsGroup": 2000},
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        }
    }))
    .unwrap()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_claim_on_a_csi_volume_is_staged_published_and_torn_down_at_upstreams_paths() {
    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({"attachRequired": false, "podInfoOnMount": true, "fsGroupPolicy": "None"}));
    let pod = claim_pod("uid-a");
    let v = n.set_up(&pod).await.unwrap();

    let target = n
        .pod_dir("uid-a")
        .join("volumes/kubernetes.io~csi/pv-1/mount");
    let got = v.get("data").unwrap();
    assert_eq!(
        (&got.path, got.read_only, got.kind),
        (&target, false, VolumeKind::Csi)
    );
    let staging = staging_path(&n.root, DRIVER, "vol-7");
    assert_eq!(
        staging,
        n.root.join(format!(
            "plugins/kubernetes.io/csi/{DRIVER}/{}/globalmount",
            hex::encode(Sha256::digest("vol-7"))
        ))
    );
    assert_eq!(n.driver.methods(), ["NodeStageVolume", "NodePublishVolume"]);
    let stage = n.driver.call("NodeStageVolume").unwrap();
    assert_eq!(stage.volume_id, "vol-7");
    assert_eq!(stage.staging, staging.display().to_string());
    assert_eq!(stage.volume_context, kv(&[("tier", "gold")]));
    let publish = n.driver.call("NodePublishVolume").unwrap();
    assert_eq!(publish.target, target.display().to_string());
    assert_eq!(publish.staging, staging.display().to_string());
    assert_eq!(
        publish.mode,
        volume_capability::access_mode::Mode::SingleNodeWriter as i32
    );
    assert!(!publish.readonly);
    assert_eq!(
        publish.volume_context,
        kv(&[
            ("tier", "gold"),
            ("csi.storage.k8s.io/pod.name", "db-uid-a"),
            ("csi.storage.k8s.io/pod.namespace", "ns"),
            ("csi.storage.k8s.io/pod.uid", "uid-a"),
            ("csi.storage.k8s.io/serviceAccount.name", "sa"),
            ("csi.storage.k8s.io/ephemeral", "false"),
        ])
    );
    // What teardown (and an agent restarted later) reads, in upstream's keys.
    let data: Value = serde_json::from_slice(
        &std::fs::read(target.parent().unwrap().join("vol_data.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        data,
        json!({"attachmentID": attachment_name("vol-7", DRIVER, "node-1"), "driverName": DRIVER,
               "nodeName": "node-1", "specVolID": "pv-1", "volumeHandle": "vol-7",
               "volumeLifecycleMode": "Persistent"})
    );
    let staged: Value = serde_json::from_slice(
        &std::fs::read(staging.parent().unwrap().join("vol_data.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        staged,
        json!({"driverName": DRIVER, "volumeHandle": "vol-7"})
    );
    assert_eq!(
        n.host.in_use.names(),
        [format!("kubernetes.io/csi/{DRIVER}^vol-7")]
    );

    // The next pass finds it mounted and asks the driver nothing.
    n.set_up(&pod).await.unwrap();
    assert_eq!(n.driver.methods().len(), 2);

    n.tear_down("uid-a").await.unwrap();
    assert_eq!(
        n.driver.methods()[2..],
        ["NodeUnpublishVolume", "NodeUnstageVolume"]
    );
    assert!(
        !target.parent().unwrap().exists(),
        "the volume's folder went"
    );
    assert!(
        !staging.parent().unwrap().exists(),
        "the staging folder went"
    );
    assert!(n.host.in_use.names().is_empty());
}

#[tokio::test]
async fn a_volume_two_pods_publish_is_unstaged_only_when_the_last_one_goes() {
    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({"attachRequired": false}));
    n.set_up(&claim_pod("uid-a")).await.unwrap();
    n.set_up(&claim_pod("uid-b")).await.unwrap();
    // Staged once: the second pod finds the staging path mounted.
    assert_eq!(
        n.driver.methods(),
        ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
    );
    n.tear_down("uid-a").await.unwrap();
    assert_eq!(n.driver.methods().last(), Some(&"NodeUnpublishVolume"));
    assert_eq!(n.host.in_use.names().len(), 1, "uid-b still uses it");
    n.tear_down("uid-b").await.unwrap();
    assert_eq!(
        n.driver.methods()[3..],
        [
            "NodeUnpublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert!(n.host.in_use.names().is_empty());
}

#[tokio::test]
async fn a_volume_that_needs_attaching_waits_for_its_volume_attachment() {
    // No CSIDriver: the API's default is attachRequired.
    let n = node(false, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    let pod = claim_pod("uid-a");
    let e = n.set_up(&pod).await.unwrap_err();
    assert!(e.is_transient());
    let name = attachment_name("vol-7", DRIVER, "node-1");
    assert_eq!(
        e.event_message(),
        format!("Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data]: volume pv-1 is not attached to this node yet (VolumeAttachment {name})")
    );
    assert!(
        n.driver.methods().is_empty(),
        "nothing asked of the driver yet"
    );
    // In use while it waits: the controller must not detach it under the pod.
    assert_eq!(n.host.in_use.names().len(), 1);

    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attacher": DRIVER, "nodeName": "node-1", "source": {"persistentVolumeName": "pv-1"}},
        "status": {"attached": true, "attachmentMetadata": {"device": "/dev/fake0"}}
    }))
    .unwrap();
    n.objects
        .attachments
        .lock()
        .unwrap()
        .insert(name, Arc::new(va));
    n.set_up(&pod).await.unwrap();
    // No STAGE_UNSTAGE_VOLUME: published straight, with the attachment's metadata.
    assert_eq!(n.driver.methods(), ["NodePublishVolume"]);
    let publish = n.driver.call("NodePublishVolume").unwrap();
    assert_eq!(publish.publish_context, kv(&[("device", "/dev/fake0")]));
    assert_eq!(publish.staging, "");
}

#[tokio::test]
async fn a_driver_not_registered_or_failing_gives_upstreams_words_and_leaves_no_mount_folder() {
    let unregistered = node(true, false);
    unregistered.put_claim_and_volume("pv-1", "vol-7");
    let e = unregistered.set_up(&claim_pod("uid-a")).await.unwrap_err();
    assert!(e.is_transient());
    assert_eq!(
        e.event_message(),
        format!("MountVolume.MountDevice failed for volume \"pv-1\" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name {DRIVER} not found in the list of registered CSI drivers")
    );

    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({"attachRequired": false}));
    *n.driver.fail_publish.lock().unwrap() = Some(tonic::Status::internal("injected failure"));
    let e = n.set_up(&claim_pod("uid-a")).await.unwrap_err();
    assert_eq!(
        e.event_message(),
        "MountVolume.SetUp failed for volume \"pv-1\" : rpc error: code = Internal desc = injected failure"
    );
    let target = n
        .pod_dir("uid-a")
        .join("volumes/kubernetes.io~csi/pv-1/mount");
    assert!(!target.exists(), "the driver's half-made target is removed");
    // Teardown still finds the staged volume through vol_data.json and unstages it.
    n.tear_down("uid-a").await.unwrap();
    assert_eq!(n.driver.methods().last(), Some(&"NodeUnstageVolume"));
    assert!(
        n.driver.mounted.lock().unwrap().is_empty(),
        "nothing left mounted"
    );
}

#[tokio::test]
async fn inline_volumes_need_a_driver_that_declares_ephemeral_and_are_never_staged() {
    let n = node(true, true);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-e"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "scratch", "csi": {"driver": DRIVER, "readOnly": true,
                                                     "volumeAttributes": {"size": "1Mi"}}}]
        }
    }))
    .unwrap();
    n.put_driver(json!({"attachRequired": false}));
    let e = n.set_up(&pod).await.unwrap_err();
    assert_eq!(
        e.event_message(),
        format!("MountVolume.SetUp failed for volume \"scratch\" : kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not supported by driver {DRIVER} (only supports [\"Persistent\"])")
    );

    n.put_driver(json!({"attachRequired": false, "podInfoOnMount": true,
                        "volumeLifecycleModes": ["Persistent", "Ephemeral"]}));
    let v = n.set_up(&pod).await.unwrap();
    assert!(v.get("scratch").unwrap().read_only);
    assert_eq!(n.driver.methods(), ["NodePublishVolume"]);
    let publish = n.driver.call("NodePublishVolume").unwrap();
    assert_eq!(publish.volume_id, inline_handle("uid-e", "scratch"));
    assert!(publish.readonly);
    assert!(publish
        .volume_context
        .contains(&("csi.storage.k8s.io/ephemeral".into(), "true".into())));
    assert!(
        n.host.in_use.names().is_empty(),
        "inline volumes are never attached"
    );
    n.tear_down("uid-e").await.unwrap();
    assert_eq!(
        n.driver.methods(),
        ["NodePublishVolume", "NodeUnpublishVolume"]
    );
}

#[tokio::test]
async fn a_driver_that_applies_fs_group_itself_gets_it_as_the_mount_group() {
    let n = node(false, true);
    let mut d = n.driver.clone();
    d.mount_group = true;
    let sock = n.root.join("csi-group.sock");
    let _s = serve(&sock, NodeServer::new(d));
    n.host.drivers.insert(
        DRIVER,
        Driver {
            endpoint: sock,
            registration: n.root.join("reg.sock"),
            node_id: "id-1".into(),
            version: "1.0.0".into(),
        },
    );
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({"attachRequired": false}));
    n.set_up(&claim_pod("uid-a")).await.unwrap();
    assert_eq!(
        n.driver.call("NodePublishVolume").unwrap().mount_group,
        "2000"
    );
}

#[tokio::test]
async fn the_drivers_secrets_go_with_stage_and_publish_and_a_missing_one_is_a_transient_failed_mount(
) {
    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({"attachRequired": false}));
    // The PV names a Secret for each call, in namespaces of their own.
    {
        let mut volumes = n.objects.volumes.lock().unwrap();
        let pv = volumes.get_mut("pv-1").unwrap();
        let csi = Arc::make_mut(pv)
            .spec
            .as_mut()
            .unwrap()
            .csi
            .as_mut()
            .unwrap();
        csi.node_stage_secret_ref = Some(k8s_openapi::api::core::v1::SecretReference {
            name: Some("stage-creds".into()),
            namespace: Some("storage".into()),
        });
        csi.node_publish_secret_ref = Some(k8s_openapi::api::core::v1::SecretReference {
            name: Some("publish-creds".into()),
            namespace: Some("storage".into()),
        });
    }
    let put = |name: &str, key: &str, value: &str| {
        let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "storage"},
            "data": {key: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, value)}
        }))
        .unwrap();
        n.objects.put_secret(s);
    };
    put("stage-creds", "user", "alice");

    // The publish Secret is not there yet: staged with its Secret, then a transient failure.
    let e = n.set_up(&claim_pod("uid-a")).await.unwrap_err();
    assert!(e.is_transient());
    assert!(
        e.event_message().starts_with(
            "MountVolume.SetUp failed for volume \"pv-1\" : fetching NodePublishSecretRef storage/publish-creds failed: \
             kubernetes.io/csi: failed to find the secret publish-creds in the namespace storage with error: "
        ),
        "{}",
        e.event_message()
    );
    assert_eq!(n.driver.methods(), ["NodeStageVolume"]);
    assert_eq!(
        n.driver.call("NodeStageVolume").unwrap().secrets,
        kv(&[("user", "alice")])
    );

    put("publish-creds", "token", "s3cr3t");
    n.set_up(&claim_pod("uid-a")).await.unwrap();
    assert_eq!(
        n.driver.call("NodePublishVolume").unwrap().secrets,
        kv(&[("token", "s3cr3t")])
    );
}

/// The tokens a publish carried, as the driver decodes them.
fn published_tokens(call: &crate::csi::fake::Call) -> Option<Value> {
    call.volume_context
        .iter()
        .find(|(k, _)| k == "csi.storage.k8s.io/serviceAccount.tokens")
        .map(|(_, v)| serde_json::from_str(v).unwrap())
}

#[tokio::test]
async fn a_driver_with_token_requests_gets_the_pods_tokens_in_the_volume_context() {
    // Without tokenRequests: no tokens asked for, none passed.
    let plain = node(true, true);
    plain.put_claim_and_volume("pv-1", "vol-7");
    plain.put_driver(json!({"attachRequired": false}));
    plain.set_up(&claim_pod("uid-a")).await.unwrap();
    let publish = plain.driver.call("NodePublishVolume").unwrap();
    assert_eq!(published_tokens(&publish), None);
    assert!(plain.objects.tokens.lock().unwrap().is_empty());

    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({
        "attachRequired": false,
        "tokenRequests": [{"audience": "vault", "expirationSeconds": 600}, {"audience": ""}]
    }));
    n.set_up(&claim_pod("uid-a")).await.unwrap();
    let asked = n.objects.tokens.lock().unwrap().clone();
    assert_eq!(
        asked,
        vec![
            crate::objects::TokenSpec {
                service_account: "sa".into(),
                audience: "vault".into(),
                expiration_seconds: 600,
            },
            crate::objects::TokenSpec {
                service_account: "sa".into(),
                audience: String::new(),
                expiration_seconds: 3600,
            },
        ],
        "one token per audience, for the pod's service account, the API's default lifetime when unset"
    );
    let tokens = published_tokens(&n.driver.call("NodePublishVolume").unwrap()).unwrap();
    assert_eq!(tokens["vault"]["token"], "token-sa-1");
    assert_eq!(tokens[""]["token"], "token-sa-2");
    let written = tokens["vault"]["expirationTimestamp"].as_str().unwrap();
    assert!(
        written.ends_with('Z') && !written.contains('.'),
        "{written}: metav1.Time's form, UTC and whole seconds"
    );
    let expires = chrono::DateTime::parse_from_rfc3339(written).unwrap();
    let left = expires.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        left > chrono::Duration::seconds(500) && left <= chrono::Duration::seconds(600),
        "{expires} is the token's expiry ({left} left)"
    );
    // Staging gets no tokens, as upstream's (only the mounter asks for them).
    assert_eq!(
        published_tokens(&n.driver.call("NodeStageVolume").unwrap()),
        None
    );
}

#[tokio::test]
async fn a_driver_that_requires_republish_is_published_again_each_pass_and_a_failure_keeps_the_volume(
) {
    // Without requiresRepublish a published volume asks the driver nothing more.
    let once = node(true, true);
    once.put_claim_and_volume("pv-1", "vol-7");
    once.put_driver(json!({"attachRequired": false}));
    let pod = claim_pod("uid-a");
    once.set_up(&pod).await.unwrap();
    once.set_up(&pod).await.unwrap();
    let publishes = |n: &Node| {
        n.driver
            .methods()
            .iter()
            .filter(|m| **m == "NodePublishVolume")
            .count()
    };
    assert_eq!(publishes(&once), 1);

    let n = node(true, true);
    n.put_claim_and_volume("pv-1", "vol-7");
    n.put_driver(json!({
        "attachRequired": false,
        "requiresRepublish": true,
        "tokenRequests": [{"audience": "vault"}]
    }));
    n.set_up(&pod).await.unwrap();
    let v = n.set_up(&pod).await.unwrap();
    assert!(v.stale().is_empty());
    assert_eq!(publishes(&n), 2, "published again on the second pass");
    let staged = n
        .driver
        .methods()
        .iter()
        .filter(|m| **m == "NodeStageVolume")
        .count();
    assert_eq!(staged, 1, "a staged volume is not staged again");
    let calls = n.driver.calls.lock().unwrap().clone();
    let republish = calls
        .iter()
        .rfind(|c| c.method == "NodePublishVolume")
        .unwrap();
    assert!(
        published_tokens(republish).is_some(),
        "the republish carries the tokens"
    );

    // A republish that fails leaves the volume published and the pod's volumes set up, with
    // the failure to report.
    *n.driver.fail_publish.lock().unwrap() = Some(tonic::Status::internal("injected failure"));
    let v = n.set_up(&pod).await.unwrap();
    let target = n
        .pod_dir("uid-a")
        .join("volumes/kubernetes.io~csi/pv-1/mount");
    assert_eq!(v.get("data").unwrap().path, target);
    assert!(
        n.driver.mounted.lock().unwrap().contains(&target),
        "still mounted"
    );
    assert_eq!(v.stale().len(), 1);
    assert_eq!(
        v.stale()[0].event_message,
        "MountVolume.SetUp failed for volume \"pv-1\" : rpc error: code = Internal desc = injected failure"
    );
    assert!(target.exists(), "the mounted target is not removed");
}
