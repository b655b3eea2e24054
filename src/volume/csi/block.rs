//! Raw block CSI volumes (a PV with a `csi` source and volumeMode Block), as upstream's CSI
//! block mapper, at its paths under `<root>/plugins/kubernetes.io/csi/volumeDevices`:
//! - `<pv>/data/vol_data.json`: driver, handle, node, attachment (what teardown reads);
//! - `staging/<pv>`: NodeStageVolume's staging path (a folder the agent makes), for drivers
//!   with STAGE_UNSTAGE_VOLUME, with a Block volume capability;
//! - `publish/<pv>/<pod uid>`: NodePublishVolume's target (a file the driver makes: a device
//!   node, or a bind mount of one);
//! - `<pv>/dev/<pod uid>`: the map file the published device is bind-mounted onto, and
//!   `<pod>/volumeDevices/kubernetes.io~csi/<pv>` the pod's link to it (`volume::block`).
//!
//! The pod's link is made before staging (pointing at the publish path, then at the device
//! it resolves to), so a teardown finds a volume whose set-up stopped half-way. A volume
//! whose map file holds the device is kept as it is: later passes, and an agent restarted,
//! ask the driver nothing. Teardown: the map file released, NodeUnpublishVolume, the link
//! removed, then NodeUnstageVolume once no other pod's map file is left.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{
    access_mode, blocking, credentials, pod_info, prepare, read_json, unique_name, write_json,
    CsiHost, CsiVolume, Prepared, Step, CSI_PLUGIN, LOG_PREFIX, PERSISTENT, STAGING_DIR,
};
use crate::csi::client::{DriverClient, NodeCapabilities};
use crate::csi::proto::csi::{self as pb, volume_capability};
use crate::objects::ClusterObjects;
use crate::volume::block;
use crate::volume::mounter::Mounter;
use crate::volume::{HostVolume, VolumeError, VolumeKind};

/// `vol_data.json` of a block volume, in upstream's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockData {
    #[serde(rename = "attachmentID", default)]
    attachment_id: String,
    driver_name: String,
    #[serde(default)]
    node_name: String,
    #[serde(rename = "specVolID", default)]
    spec_vol_id: String,
    volume_handle: String,
}

/// Upstream's paths of one block volume.
struct Paths {
    /// `<pv>`: holds `data/` and `dev/`.
    volume: PathBuf,
    data: PathBuf,
    /// The global map path: the pods' map files.
    dev: PathBuf,
    staging: PathBuf,
    publish_dir: PathBuf,
}

impl Paths {
    fn new(root_dir: &Path, spec_name: &str) -> Self {
        let base = root_dir.join(STAGING_DIR).join(block::VOLUME_DEVICES_DIR);
        // Upstream's EscapeQualifiedName.
        let volume = base.join(spec_name.replace('/', "~"));
        Paths {
            data: volume.join("data"),
            dev: volume.join("dev"),
            volume,
            staging: base.join("staging").join(spec_name),
            publish_dir: base.join("publish").join(spec_name),
        }
    }
    fn publish(&self, pod_uid: &str) -> PathBuf {
        self.publish_dir.join(pod_uid)
    }
}

/// The pod's map file of the volume whose folder (the escaped spec name) is `volume`.
pub(super) fn map_file(root_dir: &Path, volume: &str, pod_uid: &str) -> PathBuf {
    Paths::new(root_dir, volume).dev.join(pod_uid)
}

/// What the volume's `data/vol_data.json` says, from one of its map files
/// (`<volume>/dev/<pod uid>`).
pub(super) fn published_data(map_file: &Path) -> Option<super::PublishedData> {
    let volume = map_file.parent()?.parent()?;
    let d: BlockData = read_json(&volume.join("data")).ok()?;
    Some(super::PublishedData {
        attachment_id: d.attachment_id,
        driver_name: d.driver_name,
        node_name: d.node_name,
        spec_vol_id: d.spec_vol_id,
        volume_handle: d.volume_handle,
        volume_lifecycle_mode: PERSISTENT.to_string(),
    })
}

fn pod_link(pod_dir: &Path, spec_name: &str) -> PathBuf {
    block::pod_device_link(pod_dir, CSI_PLUGIN, &spec_name.replace('/', "~"))
}

/// A Block volume capability, with the access mode as for a mount (upstream's
/// fsTypeBlockName: no file system, no mount flags, no mount group).
fn capability(v: &CsiVolume, caps: &NodeCapabilities) -> pb::VolumeCapability {
    pb::VolumeCapability {
        access_type: Some(volume_capability::AccessType::Block(
            volume_capability::BlockVolume {},
        )),
        access_mode: Some(volume_capability::AccessMode {
            mode: access_mode(&v.access_mode, caps) as i32,
        }),
    }
}

/// Stages, publishes and maps one block volume for the pod (see the module documentation).
pub(super) async fn set_up(
    pod: &Pod,
    pod_dir: &Path,
    v: &CsiVolume,
    objects: &dyn ClusterObjects,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
    attachment: &str,
) -> Result<HostVolume, (String, bool)> {
    let pod_name = &crate::volume::pod_display(pod);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let paths = Paths::new(&host.root_dir, &v.spec_name);
    let link = pod_link(pod_dir, &v.spec_name);
    let publish = paths.publish(&uid);
    let done = HostVolume {
        path: link.clone(),
        read_only: v.read_only,
        kind: VolumeKind::CsiBlock,
    };
    let step = Step::Map;
    {
        let (m, dev, u, l) = (m.clone(), paths.dev.clone(), uid.clone(), link.clone());
        let mapped = blocking(move || {
            let mapped =
                block::is_mapped(&dev, &u, m.as_ref()) && std::fs::symlink_metadata(&l).is_ok();
            // The descriptor lock a crash between the bind and the lock left out, taken now.
            mapped.then(|| m.lock_device(&dev.join(&u)))
        })
        .await
        .flatten();
        match mapped {
            Some(Ok(())) => return Ok(done),
            Some(Err(e)) => {
                let reason = block::lock_failed(&paths.dev, &uid, e);
                return Err((
                    format!(
                        "MapVolume.MapBlockVolume failed for volume {:?} : {reason}",
                        v.spec_name
                    ),
                    false,
                ));
            }
            None => {}
        }
    }
    // What teardown needs, first: the link makes the pod's teardown find the volume.
    let data = BlockData {
        attachment_id: attachment.to_string(),
        driver_name: v.driver.clone(),
        node_name: host.node_name.clone(),
        spec_vol_id: v.spec_name.clone(),
        volume_handle: v.handle.clone(),
    };
    {
        let (d, l, p) = (paths.data.clone(), link.clone(), publish.clone());
        blocking(move || -> Result<(), SaveError> {
            write_json(&d, &data).map_err(SaveError::Data)?;
            block::link(&p, &l).map_err(SaveError::Link)
        })
        .await
        .unwrap_or(Err(SaveError::ThreadLost))
        .map_err(|e| {
            (
                format!(
                    "MapVolume.NewBlockVolumeMapper initialization failed for volume {:?} : {LOG_PREFIX}csi.NewBlockVolumeMapper failed to save volume info data: {e}",
                    v.spec_name
                ),
                false,
            )
        })?;
    }
    let Prepared {
        client,
        csi_driver,
        publish_context,
        caps,
    } = prepare(v, objects, host, attachment, step).await?;
    let cap = capability(v, &caps);

    // Stage, unless another pod maps the volume already (then it is staged).
    if caps.stage_unstage {
        let (m, dev, s) = (m.clone(), paths.dev.clone(), paths.staging.clone());
        let staged = blocking(move || -> std::io::Result<bool> {
            let mapped_elsewhere = std::fs::read_dir(&dev).is_ok_and(|rd| {
                rd.flatten()
                    .any(|e| m.mounted_fs(&e.path()).ok().flatten().is_some())
            });
            crate::data_dirs::ensure_private_dir(&s)?;
            Ok(mapped_elsewhere)
        })
        .await
        .unwrap_or_else(|| Err(std::io::Error::other("the blocking thread was lost")))
        .map_err(|e| {
            (
                step.stage_failed(
                    v,
                    format!(
                        "{LOG_PREFIX}blockMapper.stageVolumeForBlock failed to create dir {}: {e}",
                        paths.staging.display()
                    ),
                ),
                false,
            )
        })?;
        if !staged {
            let secrets = credentials(objects, "NodeStageSecretRef", &v.stage_secret)
                .await
                .map_err(|e| (step.stage_failed(v, e.to_string()), true))?;
            let req = pb::NodeStageVolumeRequest {
                volume_id: v.handle.clone(),
                publish_context: publish_context.clone(),
                staging_target_path: paths.staging.to_string_lossy().into_owned(),
                volume_capability: Some(cap.clone()),
                secrets,
                volume_context: v.attributes.clone().into_iter().collect(),
            };
            if let Err(e) = client.stage(req).await {
                warn!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, error = %e, "NodeStageVolume (block) failed");
                return Err((step.stage_failed(v, e.to_string()), false));
            }
            info!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, path = %paths.staging.display(), "CSI block volume staged");
        }
    }

    // Publish: the driver makes the file; its folder is the agent's.
    {
        let d = paths.publish_dir.clone();
        blocking(move || crate::data_dirs::ensure_private_dir(&d).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|| Err("the blocking thread was lost".into()))
            .map_err(|e| {
                (
                    step.publish_failed(
                        v,
                        format!("{LOG_PREFIX}blockMapper.publishVolumeForBlock failed to create dir: {e}"),
                    ),
                    false,
                )
            })?;
    }
    let mut context: std::collections::HashMap<String, String> =
        v.attributes.clone().into_iter().collect();
    if csi_driver.as_deref().and_then(|d| d.spec.pod_info_on_mount) == Some(true) {
        context.extend(pod_info(pod, PERSISTENT));
    }
    let secrets = credentials(objects, "NodePublishSecretRef", &v.publish_secret)
        .await
        .map_err(|e| (step.publish_failed(v, e.to_string()), true))?;
    let req = pb::NodePublishVolumeRequest {
        volume_id: v.handle.clone(),
        publish_context,
        // As upstream: the staging path even when the driver does not stage.
        staging_target_path: paths.staging.to_string_lossy().into_owned(),
        target_path: publish.to_string_lossy().into_owned(),
        volume_capability: Some(cap),
        readonly: v.read_only,
        secrets,
        volume_context: context,
    };
    if let Err(e) = client.publish(req).await {
        warn!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, error = %e, "NodePublishVolume (block) failed");
        return Err((step.publish_failed(v, e.to_string()), false));
    }

    // Map: the device the publish path resolves to (upstream's EvalHostSymlinks).
    let (mm, p, dev, u, l) = (
        m.clone(),
        publish.clone(),
        paths.dev.clone(),
        uid.clone(),
        link.clone(),
    );
    let mapped = blocking(move || -> Result<PathBuf, (String, &'static str)> {
        let device = std::fs::canonicalize(&p)
            .map_err(|e| (format!("{}: {e}", p.display()), "EvalHostSymlinks"))?;
        block::map(&device, &dev, &u, &l, mm.as_ref())
            .map_err(|r| (r.to_string(), "MapBlockVolume"))?;
        Ok(device)
    })
    .await
    .unwrap_or_else(|| Err(("the blocking thread was lost".into(), "MapBlockVolume")));
    let device = mapped.map_err(|(reason, op)| {
        (
            format!(
                "MapVolume.{op} failed for volume {:?} : {reason}",
                v.spec_name
            ),
            false,
        )
    })?;
    info!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, device = %device.display(), read_only = v.read_only, "CSI block volume mapped");
    Ok(done)
}

fn teardown_error(path: &Path, reason: String) -> VolumeError {
    VolumeError::TearDown {
        op: "unmap CSI block volume",
        path: path.to_path_buf(),
        source: std::io::Error::other(reason),
    }
}

/// Unmaps and unpublishes the pod's block CSI volumes, found by its links, and unstages
/// those no other pod maps. Idempotent; an error leaves the volume for the next try.
pub(super) async fn tear_down(
    pod_dir: &Path,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    let dir = pod_dir.join(block::VOLUME_DEVICES_DIR).join(CSI_PLUGIN);
    let names: Vec<String> = blocking(move || {
        std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    })
    .await
    .unwrap_or_default();
    let uid = pod_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for name in names {
        tear_down_one(&name, pod_dir, &uid, host, m).await?;
    }
    Ok(())
}

async fn tear_down_one(
    name: &str,
    pod_dir: &Path,
    uid: &str,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    let link = block::pod_device_link(pod_dir, CSI_PLUGIN, name);
    let paths = Paths::new(&host.root_dir, name);
    let map_file = paths.dev.join(uid);
    // The map file first: the pod's hold on the device goes before the driver's.
    let data = {
        let (m, dev, data_dir, u) = (
            m.clone(),
            paths.dev.clone(),
            paths.data.clone(),
            uid.to_string(),
        );
        blocking(move || -> std::io::Result<Option<BlockData>> {
            block::release_map_file(&dev, &u, m.as_ref())?;
            Ok(read_json(&data_dir).ok())
        })
        .await
        .unwrap_or_else(|| Err(std::io::Error::other("the blocking thread was lost")))
        .map_err(|e| teardown_error(&map_file, e.to_string()))?
    };
    let Some(data) = data else {
        // Nothing known of the volume: nothing was staged or published for it.
        let l = link.clone();
        blocking(move || std::fs::remove_file(l)).await;
        return Ok(());
    };
    let Some(driver) = host.drivers.get(&data.driver_name) else {
        return Err(teardown_error(
            &link,
            format!(
                "driver name {} not found in the list of registered CSI drivers",
                data.driver_name
            ),
        ));
    };
    let client = DriverClient::new(&driver.endpoint);
    let publish = paths.publish(uid);
    // Even when the publish path is gone: a publish that timed out may still be under way.
    client
        .unpublish(&data.volume_handle, &publish)
        .await
        .map_err(|e| teardown_error(&publish, format!("NodeUnpublishVolume: {e}")))?;
    info!(pod = uid, volume = %data.spec_vol_id, driver = %data.driver_name, "CSI block volume unpublished");
    let (l, dev) = (link.clone(), paths.dev.clone());
    let last = blocking(move || {
        let _ = std::fs::remove_file(&l);
        std::fs::read_dir(&dev).map_or(true, |mut rd| rd.next().is_none())
    })
    .await
    .unwrap_or(false);
    host.in_use
        .remove(&unique_name(&data.driver_name, &data.volume_handle), uid);
    if last {
        unstage(&data, &paths, &client, m).await?;
    }
    Ok(())
}

/// Upstream's TearDownDevice: NodeUnstageVolume (when the driver stages and the staging
/// folder is there), then the volume's folders.
async fn unstage(
    data: &BlockData,
    paths: &Paths,
    client: &DriverClient,
    m: &Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    let s = paths.staging.clone();
    let exists = blocking(move || std::fs::symlink_metadata(s).is_ok())
        .await
        .unwrap_or(true);
    if exists {
        let caps = client
            .node_capabilities()
            .await
            .map_err(|e| teardown_error(&paths.staging, format!("NodeGetCapabilities: {e}")))?;
        if caps.stage_unstage {
            client
                .unstage(&data.volume_handle, &paths.staging)
                .await
                .map_err(|e| teardown_error(&paths.staging, format!("NodeUnstageVolume: {e}")))?;
            info!(volume = %data.spec_vol_id, driver = %data.driver_name, "CSI block volume unstaged");
        }
    }
    let (m, staging, publish_dir, volume, data_dir, dev) = (
        m.clone(),
        paths.staging.clone(),
        paths.publish_dir.clone(),
        paths.volume.clone(),
        paths.data.clone(),
        paths.dev.clone(),
    );
    let still = blocking(move || {
        if m.mounted_fs(&staging).ok().flatten().is_some() {
            return Some(staging);
        }
        // Not remove_dir_all: whatever a driver left there is its own.
        let _ = std::fs::remove_dir(&staging);
        let _ = std::fs::remove_dir(&publish_dir);
        let _ = std::fs::remove_file(data_dir.join(super::VOL_DATA));
        let _ = std::fs::remove_dir(&data_dir);
        let _ = std::fs::remove_dir(&dev);
        let _ = std::fs::remove_dir(&volume);
        None
    })
    .await
    .flatten();
    match still {
        Some(p) => Err(teardown_error(
            &p,
            "still mounted after NodeUnstageVolume".into(),
        )),
        None => Ok(()),
    }
}

/// Why a block volume's data file or pod link could not be saved before its driver calls.
#[derive(Debug, thiserror::Error)]
enum SaveError {
    #[error("{0}")]
    Data(#[source] std::io::Error),
    #[error("{0}")]
    Link(#[source] block::MapError),
    #[error("the blocking thread was lost")]
    ThreadLost,
}

#[cfg(test)]
mod tests_support {
    use super::super::tests::Node;
    use super::*;
    use serde_json::json;

    pub(super) fn block_pod(uid: &str, read_only: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("db-{uid}"), "namespace": "ns", "uid": uid},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                                "volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}],
                "volumes": [{"name": "data",
                             "persistentVolumeClaim": {"claimName": "data", "readOnly": read_only}}]
            }
        }))
        .unwrap()
    }

    pub(super) fn block_volume(n: &Node) {
        n.put_claim_and_volume("pv-1", "vol-7");
        let mut volumes = n.objects.volumes.lock().unwrap();
        let pv = Arc::make_mut(volumes.get_mut("pv-1").unwrap());
        pv.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{node, DRIVER};
    use super::tests_support::{block_pod, block_volume};
    use super::*;
    use serde_json::{json, Value};

    #[tokio::test]
    async fn a_block_claim_is_staged_published_and_mapped_at_upstreams_paths_and_undone_by_the_last_pod(
    ) {
        let n = node(true, true);
        block_volume(&n);
        n.put_driver(json!({"attachRequired": false, "podInfoOnMount": true}));
        let v = n.set_up(&block_pod("uid-a", false)).await.unwrap();

        let base = n.root.join("plugins/kubernetes.io/csi/volumeDevices");
        let link = n
            .pod_dir("uid-a")
            .join("volumeDevices/kubernetes.io~csi/pv-1");
        let got = v.get("data").unwrap();
        assert_eq!(
            (&got.path, got.read_only, got.kind),
            (&link, false, VolumeKind::CsiBlock)
        );
        assert_eq!(n.driver.methods(), ["NodeStageVolume", "NodePublishVolume"]);
        let stage = n.driver.call("NodeStageVolume").unwrap();
        let staging = base.join("staging/pv-1");
        assert_eq!(stage.staging, staging.display().to_string());
        assert!(stage.block, "a Block capability");
        assert!(staging.is_dir(), "the staging folder is the agent's");
        let publish = n.driver.call("NodePublishVolume").unwrap();
        let target = base.join("publish/pv-1/uid-a");
        assert_eq!(publish.target, target.display().to_string());
        assert_eq!(publish.staging, staging.display().to_string());
        assert!(publish.block && !publish.readonly);
        assert!(publish
            .volume_context
            .contains(&("csi.storage.k8s.io/pod.uid".into(), "uid-a".into())));
        // Mapped: the pod's link to the published device, which is bound onto the map file.
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            std::fs::canonicalize(&target).unwrap()
        );
        let map_file = base.join("pv-1/dev/uid-a");
        assert!(n.driver.mounted.lock().unwrap().contains(&map_file));
        let data: Value =
            serde_json::from_slice(&std::fs::read(base.join("pv-1/data/vol_data.json")).unwrap())
                .unwrap();
        assert_eq!(
            data,
            json!({"attachmentID": super::super::attachment_name("vol-7", DRIVER, "node-1"),
                   "driverName": DRIVER, "nodeName": "node-1", "specVolID": "pv-1",
                   "volumeHandle": "vol-7"})
        );
        assert_eq!(n.host.in_use.names().len(), 1);
        // The map file is the volume path its stats are asked for, and names the volume.
        assert_eq!(
            map_file,
            super::super::block_map_file(&n.root, "pv-1", "uid-a")
        );
        let published = super::super::published_data(&map_file).unwrap();
        assert_eq!(
            (
                published.driver_name.as_str(),
                published.volume_handle.as_str()
            ),
            (DRIVER, "vol-7")
        );

        // Later passes (and an agent restarted: all of it is on disk) ask the driver nothing;
        // a second pod is published and mapped, not staged again.
        n.set_up(&block_pod("uid-a", false)).await.unwrap();
        assert_eq!(n.driver.methods().len(), 2);
        let ro = n.set_up(&block_pod("uid-b", true)).await.unwrap();
        assert!(ro.get("data").unwrap().read_only);
        assert_eq!(
            n.driver.methods(),
            ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
        );
        assert!(n.driver.calls.lock().unwrap()[2].readonly);

        n.tear_down("uid-a").await.unwrap();
        assert_eq!(n.driver.methods()[3..], ["NodeUnpublishVolume"]);
        assert!(std::fs::symlink_metadata(&link).is_err(), "the link went");
        assert!(!map_file.exists() && !target.exists());
        assert!(staging.exists(), "uid-b still maps it");
        n.tear_down("uid-b").await.unwrap();
        assert_eq!(
            n.driver.methods()[4..],
            ["NodeUnpublishVolume", "NodeUnstageVolume"]
        );
        assert!(
            n.driver.mounted.lock().unwrap().is_empty(),
            "nothing mounted"
        );
        assert!(!base.join("pv-1").exists() && !staging.exists());
        assert!(!base.join("publish/pv-1").exists());
        assert!(n.host.in_use.names().is_empty());
        let links = n.pod_dir("uid-b").join("volumeDevices/kubernetes.io~csi");
        assert_eq!(std::fs::read_dir(links).unwrap().count(), 0, "no link left");
    }

    #[tokio::test]
    async fn a_block_volume_whose_publish_fails_is_still_unstaged_by_the_teardown() {
        let n = node(true, true);
        block_volume(&n);
        n.put_driver(json!({"attachRequired": false}));
        *n.driver.fail_publish.lock().unwrap() = Some(tonic::Status::internal("injected"));
        let e = n.set_up(&block_pod("uid-a", false)).await.unwrap_err();
        assert_eq!(
            e.event_message(),
            "MapVolume.MapPodDevice failed for volume \"pv-1\" : rpc error: code = Internal desc = injected"
        );
        n.tear_down("uid-a").await.unwrap();
        assert_eq!(
            n.driver.methods(),
            [
                "NodeStageVolume",
                "NodePublishVolume",
                "NodeUnpublishVolume",
                "NodeUnstageVolume"
            ]
        );
        assert!(n.driver.mounted.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn modes_that_disagree_ask_the_driver_nothing() {
        let n = node(true, true);
        block_volume(&n);
        n.put_driver(json!({"attachRequired": false}));
        let mut pod = block_pod("uid-a", false);
        let c = &mut pod.spec.as_mut().unwrap().containers[0];
        c.volume_devices = None;
        c.volume_mounts = Some(vec![serde_json::from_value(
            json!({"name": "data", "mountPath": "/data"}),
        )
        .unwrap()]);
        let e = n.set_up(&pod).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod db-uid-a_ns(uid-a): container \"c\": volume \"data\": volume data has volumeMode Block, but is specified in volumeMounts"
        );
        assert!(n.driver.methods().is_empty());

        // A Filesystem volume in volumeDevices.
        let fs = node(true, true);
        fs.put_claim_and_volume("pv-1", "vol-7");
        fs.put_driver(json!({"attachRequired": false}));
        let e = fs.set_up(&block_pod("uid-a", false)).await.unwrap_err();
        assert!(
            e.event_message().ends_with(
                "failed to process volumes=[data]: volume data has volumeMode Filesystem, but is specified in volumeDevices"
            ),
            "{}",
            e.event_message()
        );
        assert!(fs.driver.methods().is_empty());
    }

    /// An agent restarted finds the map on disk: no driver call, the volume in use again,
    /// and its teardown unmaps, unpublishes and unstages what the earlier agent made.
    #[tokio::test]
    async fn a_restarted_agent_keeps_a_mapped_volume_and_tears_it_down_without_leaks() {
        let n = node(true, true);
        block_volume(&n);
        n.put_driver(json!({"attachRequired": true}));
        let va: k8s_openapi::api::storage::v1::VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": super::super::attachment_name("vol-7", DRIVER, "node-1")},
            "spec": {"attacher": DRIVER, "nodeName": "node-1", "source": {"persistentVolumeName": "pv-1"}},
            "status": {"attached": true}
        }))
        .unwrap();
        n.objects.attachments.lock().unwrap().insert(
            super::super::attachment_name("vol-7", DRIVER, "node-1"),
            Arc::new(va),
        );
        let pod = block_pod("uid-a", false);
        n.set_up(&pod).await.unwrap();
        assert_eq!(n.driver.methods().len(), 2);

        // The new process: nothing in memory but the registered driver.
        let restarted = CsiHost {
            in_use: Default::default(),
            ..n.host.clone()
        };
        let ctx = crate::volume::DownwardContext {
            node_name: "node-1".into(),
            ..Default::default()
        };
        let v = crate::volume::setup_with(
            &pod,
            &n.pod_dir("uid-a"),
            &ctx,
            &n.objects,
            &restarted,
            n.m.clone(),
        )
        .await
        .unwrap();
        assert_eq!(v.get("data").unwrap().kind, VolumeKind::CsiBlock);
        assert_eq!(n.driver.methods().len(), 2, "the driver is asked nothing");
        assert_eq!(
            restarted.in_use.names(),
            [format!("kubernetes.io/csi/{DRIVER}^vol-7")],
            "in use again: the attach/detach controller must not detach it"
        );
        super::super::tear_down(&n.pod_dir("uid-a"), &restarted, n.m.clone())
            .await
            .unwrap();
        assert_eq!(
            n.driver.methods()[2..],
            ["NodeUnpublishVolume", "NodeUnstageVolume"]
        );
        assert!(n.driver.mounted.lock().unwrap().is_empty());
        assert!(restarted.in_use.names().is_empty());
        assert!(!n
            .root
            .join("plugins/kubernetes.io/csi/volumeDevices/pv-1")
            .exists());
    }
}
