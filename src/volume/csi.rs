//! CSI volumes (a PersistentVolume with a `csi` source, or a pod's inline `csi` volume), set
//! up and torn down by their driver as upstream's CSI plugin does it, with upstream's paths
//! so the drivers, and tools that know them, find what they expect:
//! - stage (drivers with STAGE_UNSTAGE_VOLUME, persistent volumes only): NodeStageVolume on
//!   `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount`, beside a
//!   `vol_data.json` naming the driver and the handle;
//! - publish: NodePublishVolume on `<pod>/volumes/kubernetes.io~csi/<name>/mount` (`<name>`:
//!   the PV's name, or the inline volume's), beside a `vol_data.json` with what teardown
//!   needs (driver, handle, node, lifecycle mode, attachment name); a failed publish leaves
//!   no folder behind;
//! - attach: a driver whose CSIDriver does not say `attachRequired: false` (or that has no
//!   CSIDriver) waits for the attach/detach controller's VolumeAttachment
//!   (`csi-<sha256(handle + driver + node)>`) to be attached, and passes its metadata as the
//!   publish context; meanwhile the volume is in the node's `volumesInUse`, so the
//!   controller never detaches it under a mount;
//! - fsGroup by the CSIDriver's fsGroupPolicy (ReadWriteOnceWithFSType by default), passed
//!   as `volume_mount_group` to drivers that can apply it, else applied by the agent;
//! - teardown: NodeUnpublishVolume, then NodeUnstageVolume once no other pod on the node
//!   publishes that volume; all of it read from the `vol_data.json` files, so an agent
//!   restarted (or a pod found after one) unmounts exactly what was mounted.
//!
//! A volume whose target is already a mount point is kept as it is: passes after the first
//! (and after an agent restart) make no driver call. The driver calls run on the async
//! runtime before the blocking set-up pass, which only reads their outcome.
//!
//! The drivers' Secrets (a PV's nodeStageSecretRef and nodePublishSecretRef, an inline
//! volume's nodePublishSecretRef in the pod's namespace) are read through `objects` at
//! each call and sent with it; one that cannot be read is a transient FailedMount.
//!
//! Raw block volumes (a PV with volumeMode Block) are staged, published and mapped as
//! upstream's CSI block mapper does (`block`).
//!
//! A CSIDriver's tokenRequests get the pod's service-account tokens (one per audience, bound
//! to the pod, from the token manager) in the volume context's
//! `csi.storage.k8s.io/serviceAccount.tokens`, as upstream's csiMountMgr gives them; with
//! requiresRepublish the published volume is published again on every pass (upstream
//! remounts such volumes at each pod sync), so the driver sees renewed tokens; a failed
//! republish leaves the volume as it is and the pod running, reported as a FailedMount.
//!
//! A raw block volume's publish gets no tokens: upstream's block mapper sends none. Not done
//! yet: SELinux mount contexts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Pod, Volume};
use k8s_openapi::api::storage::v1::CSIDriver;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::fetch::Fetched;
use super::mounter::Mounter;
use super::source::{self, VolumeSource};
use super::{Blame, HostVolume, VolumeError, VolumeKind};
use crate::csi::client::{CsiError, DriverClient, NodeCapabilities};
use crate::csi::proto::csi::{self as pb, volume_capability};
use crate::csi::Drivers;
use crate::objects::ClusterObjects;

pub const CSI_PLUGIN: &str = "kubernetes.io~csi";
/// Where staged volumes live, under the root dir.
pub const STAGING_DIR: &str = "plugins/kubernetes.io/csi";
const VOL_DATA: &str = "vol_data.json";
const MOUNT_DIR: &str = "mount";
/// The prefix upstream's CSI plugin gives its errors.
const LOG_PREFIX: &str = "kubernetes.io/csi: ";

/// What the CSI volume code needs of the node: the registered drivers, the root dir (for
/// the staging paths and the other pods' volumes), the node's name (attachments are per
/// node) and the volumes in use, which the node status reports.
#[derive(Debug, Clone, Default)]
pub struct CsiHost {
    pub drivers: Drivers,
    pub root_dir: PathBuf,
    pub node_name: String,
    pub in_use: VolumesInUse,
}

/// The node's `status.volumesInUse`: the unique names (`kubernetes.io/csi/<driver>^<handle>`)
/// of the attachable volumes mounted here or about to be, which the attach/detach
/// controller must not detach.
#[derive(Debug, Clone, Default)]
pub struct VolumesInUse(Arc<RwLock<BTreeMap<String, BTreeSet<String>>>>);

impl VolumesInUse {
    /// Sorted, as upstream reports them.
    pub fn names(&self) -> Vec<String> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }
    fn add(&self, name: &str, pod_uid: &str) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default()
            .insert(pod_uid.to_string());
    }
    fn remove(&self, name: &str, pod_uid: &str) {
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        if let Some(pods) = m.get_mut(name) {
            pods.remove(pod_uid);
            if pods.is_empty() {
                m.remove(name);
            }
        }
    }
}

/// The unique volume name upstream's volume manager uses for a CSI volume.
pub fn unique_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// The VolumeAttachment the attach/detach controller makes for a volume on a node.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!(
        "csi-{}",
        hex::encode(Sha256::digest(format!("{handle}{driver}{node}")))
    )
}

/// An inline volume's handle: unique per pod and volume.
pub fn inline_handle(pod_uid: &str, volume: &str) -> String {
    format!(
        "csi-{}",
        hex::encode(Sha256::digest(format!("{pod_uid}{volume}")))
    )
}

/// The staging path of a persistent volume.
pub fn staging_path(root_dir: &Path, driver: &str, handle: &str) -> PathBuf {
    root_dir
        .join(STAGING_DIR)
        .join(driver)
        .join(hex::encode(Sha256::digest(handle)))
        .join("globalmount")
}

/// The `vol_data.json` beside a published volume's mount point.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PublishedData {
    #[serde(rename = "attachmentID", default)]
    pub attachment_id: String,
    pub driver_name: String,
    #[serde(default)]
    pub node_name: String,
    #[serde(rename = "specVolID", default)]
    pub spec_vol_id: String,
    pub volume_handle: String,
    #[serde(default)]
    pub volume_lifecycle_mode: String,
}

/// What `vol_data.json` says of the volume published at `target` (its driver and handle):
/// a filesystem volume's mount point, or a block volume's map file (`block::map_file`).
pub(crate) fn published_data(target: &Path) -> Option<PublishedData> {
    read_json(target.parent()?)
        .ok()
        .or_else(|| block::published_data(target))
}

/// The map file of a CSI block volume for a pod (`<root>/plugins/kubernetes.io/csi/
/// volumeDevices/<volume>/dev/<pod uid>`, the device bound onto it): upstream's volume path
/// in NodeGetVolumeStats for a block volume. `volume` is the folder name of the pod's link.
pub(crate) fn block_map_file(root_dir: &Path, volume: &str, pod_uid: &str) -> PathBuf {
    block::map_file(root_dir, volume, pod_uid)
}

/// The `vol_data.json` beside a staging path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StagedData {
    driver_name: String,
    volume_handle: String,
}

const PERSISTENT: &str = "Persistent";
const EPHEMERAL: &str = "Ephemeral";

/// One CSI volume of a pod, as the spec gives it.
struct CsiVolume {
    /// The pod's volume name (what the set-up pass looks the outcome up by).
    pod_volume: String,
    /// The name upstream's events and paths use: the PV's name, or the inline volume's.
    spec_name: String,
    driver: String,
    handle: String,
    read_only: bool,
    fs_type: String,
    attributes: BTreeMap<String, String>,
    /// The PV's first access mode (ReadWriteOnce for inline volumes), as upstream takes it.
    access_mode: String,
    access_modes: Vec<String>,
    mount_options: Vec<String>,
    lifecycle: &'static str,
    /// The Secrets (namespace, name) whose data goes with NodeStageVolume and
    /// NodePublishVolume.
    stage_secret: Option<(String, String)>,
    publish_secret: Option<(String, String)>,
    /// A raw block volume (the PV's volumeMode Block): staged and published as a device
    /// and mapped for the pod (`block`).
    block: bool,
}

/// What the CSI pass made of one volume, for the blocking pass to report.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pod: String,
    volume: String,
    result: Result<HostVolume, (String, bool)>,
    /// A published volume whose republish failed: it stays as it was (`result` is Ok), and
    /// this is the FailedMount message.
    republish_failed: Option<String>,
}

impl Outcome {
    pub(super) fn into_result(self) -> Result<HostVolume, VolumeError> {
        self.result
            .map_err(|(message, transient)| VolumeError::Csi {
                pod: self.pod,
                volume: self.volume,
                message,
                transient,
            })
    }

    /// Why the republish of a published volume failed this pass, in the words of its event.
    pub(super) fn republish_failure(&self) -> Option<VolumeError> {
        self.republish_failed
            .clone()
            .map(|message| VolumeError::Csi {
                pod: self.pod.clone(),
                volume: self.volume.clone(),
                message,
                transient: true,
            })
    }
}

/// The volume context key upstream gives a driver its tokens under.
const TOKENS_KEY: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// The pod's service-account tokens the driver asks for, as the JSON upstream passes:
/// `{"<audience>": {"token": ..., "expirationTimestamp": ...}}`. An empty audience is a
/// token for the apiserver's own audiences, keyed "".
async fn service_account_tokens(
    pod: &Pod,
    requests: &[k8s_openapi::api::storage::v1::TokenRequest],
    objects: &dyn ClusterObjects,
) -> Result<String, DriverInputError> {
    let service_account = super::fetch::service_account(pod);
    let mut out = serde_json::Map::new();
    for r in requests {
        let spec = crate::objects::TokenSpec {
            service_account: service_account.clone(),
            audience: r.audience.clone(),
            // The TokenRequest API's default when the CSIDriver leaves it unset.
            expiration_seconds: r
                .expiration_seconds
                .unwrap_or(super::fetch::DEFAULT_TOKEN_SECONDS),
        };
        let t = objects
            .service_account_token(pod, &spec)
            .await
            .map_err(DriverInputError::Token)?;
        out.insert(
            r.audience.clone(),
            serde_json::json!({
                "token": t.token,
                // metav1.Time's form: RFC 3339 in UTC, whole seconds.
                "expirationTimestamp": t.expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            }),
        );
    }
    Ok(serde_json::Value::Object(out).to_string())
}

/// Whether the volume's driver asks to be published again while mounted.
async fn requires_republish(objects: &dyn ClusterObjects, driver: &str) -> bool {
    matches!(objects.csi_driver(driver).await, Ok(Some(d)) if d.spec.requires_republish == Some(true))
}

fn csi_volumes(pod: &Pod, fetched: &Fetched, pod_name: &str) -> Vec<CsiVolume> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    for vol in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(src) = &vol.csi {
            out.push(CsiVolume {
                pod_volume: vol.name.clone(),
                spec_name: vol.name.clone(),
                driver: src.driver.clone(),
                handle: inline_handle(uid, &vol.name),
                read_only: src.read_only.unwrap_or(false),
                fs_type: src.fs_type.clone().unwrap_or_default(),
                attributes: src.volume_attributes.clone().unwrap_or_default(),
                access_mode: "ReadWriteOnce".into(),
                access_modes: vec![],
                mount_options: vec![],
                lifecycle: EPHEMERAL,
                stage_secret: None,
                block: false,
                // An inline volume's Secret is the pod's namespace's.
                publish_secret: src.node_publish_secret_ref.as_ref().map(|r| {
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    (ns, r.name.clone())
                }),
            });
        } else if let Some(v) = persistent_csi(pod, vol, fetched, pod_name) {
            out.push(v);
        }
    }
    out
}

/// A claim-backed volume whose bound PV is a CSI one; None for every other volume and for
/// claims that cannot be used yet (the set-up pass reports why).
fn persistent_csi(pod: &Pod, vol: &Volume, fetched: &Fetched, pod_name: &str) -> Option<CsiVolume> {
    if vol.persistent_volume_claim.is_none() && vol.ephemeral.is_none() {
        return None;
    }
    let blame = Blame {
        pod: pod_name,
        volume: &vol.name,
    };
    let (pv, claim_read_only) = super::persistent::resolve(pod, vol, fetched, &blame).ok()?;
    let spec = pv.spec.as_ref()?;
    let src = spec.csi.as_ref()?;
    let mode = super::block::volume_mode(&pv);
    if super::block::uses(pod)
        .check(pod_name, &vol.name, mode)
        .is_err()
    {
        // Refused by the set-up pass, in upstream's words; the driver is not asked.
        return None;
    }
    let access_modes = spec.access_modes.clone().unwrap_or_default();
    Some(CsiVolume {
        pod_volume: vol.name.clone(),
        spec_name: pv.metadata.name.clone().unwrap_or_default(),
        driver: src.driver.clone(),
        handle: src.volume_handle.clone(),
        read_only: claim_read_only || src.read_only.unwrap_or(false),
        fs_type: src.fs_type.clone().unwrap_or_default(),
        attributes: src.volume_attributes.clone().unwrap_or_default(),
        access_mode: access_modes
            .first()
            .cloned()
            .unwrap_or_else(|| "ReadWriteOnce".into()),
        access_modes,
        mount_options: spec.mount_options.clone().unwrap_or_default(),
        lifecycle: PERSISTENT,
        stage_secret: src.node_stage_secret_ref.as_ref().map(secret_ref),
        publish_secret: src.node_publish_secret_ref.as_ref().map(secret_ref),
        block: mode == super::block::BLOCK,
    })
}

fn secret_ref(r: &k8s_openapi::api::core::v1::SecretReference) -> (String, String) {
    (
        r.namespace.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
    )
}

/// A Secret's data as a driver gets it (upstream's getCredentialsFromSecret), or
/// upstream's words for why not: `fetching <field> ns/name failed: ...`.
async fn credentials(
    objects: &dyn ClusterObjects,
    field: &str,
    secret: &Option<(String, String)>,
) -> Result<HashMap<String, String>, DriverInputError> {
    let Some((ns, name)) = secret else {
        return Ok(HashMap::new());
    };
    match objects.secret(ns, name).await {
        Ok(s) => Ok(s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
            .collect()),
        Err(source) => Err(DriverInputError::Secret {
            field: field.to_string(),
            namespace: ns.clone(),
            name: name.clone(),
            source,
        }),
    }
}

/// An object a driver's call carries that could not be read, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriverInputError {
    #[error("{LOG_PREFIX}mounter.SetUpAt failed to get service account token attributes: {0}")]
    Token(#[source] crate::objects::ObjectError),
    #[error("fetching {field} {namespace}/{name} failed: {LOG_PREFIX}failed to find the secret {name} in the namespace {namespace} with error: {source}")]
    Secret {
        field: String,
        namespace: String,
        name: String,
        #[source]
        source: crate::objects::ObjectError,
    },
}

/// Kubernetes access modes as CSI ones (upstream's asCSIAccessModeV1 and its
/// SINGLE_NODE_MULTI_WRITER variant).
fn access_mode(mode: &str, caps: &NodeCapabilities) -> volume_capability::access_mode::Mode {
    use volume_capability::access_mode::Mode;
    match (mode, caps.single_node_multi_writer) {
        ("ReadWriteOnce", true) => Mode::SingleNodeMultiWriter,
        ("ReadWriteOncePod", true) => Mode::SingleNodeSingleWriter,
        ("ReadWriteOnce", false) | ("ReadWriteOncePod", false) => Mode::SingleNodeWriter,
        ("ReadOnlyMany", _) => Mode::MultiNodeReaderOnly,
        ("ReadWriteMany", _) => Mode::MultiNodeMultiWriter,
        _ => Mode::Unknown,
    }
}

fn capability(v: &CsiVolume, caps: &NodeCapabilities, group: Option<u32>) -> pb::VolumeCapability {
    pb::VolumeCapability {
        access_type: Some(volume_capability::AccessType::Mount(
            volume_capability::MountVolume {
                fs_type: v.fs_type.clone(),
                mount_flags: v.mount_options.clone(),
                volume_mount_group: group
                    .filter(|_| caps.volume_mount_group)
                    .map(|g| g.to_string())
                    .unwrap_or_default(),
            },
        )),
        access_mode: Some(volume_capability::AccessMode {
            mode: access_mode(&v.access_mode, caps) as i32,
        }),
    }
}

/// The pod's fields upstream adds to the volume context of drivers with podInfoOnMount.
fn pod_info(pod: &Pod, lifecycle: &str) -> [(String, String); 5] {
    let m = &pod.metadata;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    [
        (
            "csi.storage.k8s.io/pod.name".into(),
            m.name.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/pod.namespace".into(),
            m.namespace.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/pod.uid".into(),
            m.uid.clone().unwrap_or_default(),
        ),
        ("csi.storage.k8s.io/serviceAccount.name".into(), sa),
        (
            "csi.storage.k8s.io/ephemeral".into(),
            (lifecycle == EPHEMERAL).to_string(),
        ),
    ]
}

/// Whether the agent applies the pod's fsGroup to the volume (upstream's supportsFSGroup).
fn applies_fs_group(v: &CsiVolume, driver: Option<&CSIDriver>) -> bool {
    let policy = driver
        .and_then(|d| d.spec.fs_group_policy.clone())
        .unwrap_or_else(|| "ReadWriteOnceWithFSType".into());
    match policy.as_str() {
        "File" => true,
        "None" => false,
        _ => {
            if v.fs_type.is_empty() {
                return false;
            }
            // Inline volumes have no access modes and count as ReadWriteOnce.
            v.lifecycle == EPHEMERAL || v.access_modes.iter().any(|m| m == "ReadWriteOnce")
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

fn mounted(m: &Arc<dyn Mounter>, p: &Path) -> bool {
    m.mounted_fs(p).ok().flatten().is_some()
}

fn write_json<T: Serialize>(dir: &Path, value: &T) -> std::io::Result<()> {
    crate::data_dirs::ensure_private_dir(dir)?;
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{VOL_DATA}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, dir.join(VOL_DATA))
}

fn read_json<T: for<'de> Deserialize<'de>>(dir: &Path) -> std::io::Result<T> {
    let bytes = std::fs::read(dir.join(VOL_DATA))?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// Sets up the pod's CSI volumes through their drivers and records each outcome in
/// `fetched` for the blocking pass.
pub(super) async fn set_up(
    pod: &Pod,
    pod_dir: &Path,
    fetched: &mut Fetched,
    objects: &dyn ClusterObjects,
    host: &CsiHost,
    m: Arc<dyn Mounter>,
) {
    let pod_name = super::pod_display(pod);
    for v in csi_volumes(pod, fetched, &pod_name) {
        let result = crate::metrics::storage::csi_mount(
            pod,
            &v.pod_volume,
            &v.driver,
            set_up_one(pod, pod_dir, &v, objects, host, &m, &pod_name),
        )
        .await;
        let (result, republish_failed) = match result {
            Ok(s) => (Ok(s.volume), s.republish_failed),
            Err(e) => (Err(e), None),
        };
        fetched.csi.insert(
            v.pod_volume.clone(),
            Outcome {
                pod: pod_name.clone(),
                volume: v.pod_volume.clone(),
                result,
                republish_failed,
            },
        );
    }
}

/// A CSI volume set up: where it is, and for one published before whose driver asks for
/// republishing, why this pass's republish failed.
struct SetUp {
    volume: HostVolume,
    republish_failed: Option<String>,
}

impl From<HostVolume> for SetUp {
    fn from(volume: HostVolume) -> Self {
        SetUp {
            volume,
            republish_failed: None,
        }
    }
}

async fn set_up_one(
    pod: &Pod,
    pod_dir: &Path,
    v: &CsiVolume,
    objects: &dyn ClusterObjects,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
    pod_name: &str,
) -> Result<SetUp, (String, bool)> {
    let spec_dir = pod_dir
        .join("volumes")
        .join(CSI_PLUGIN)
        .join(v.spec_name.replace('/', "~"));
    let target = spec_dir.join(MOUNT_DIR);
    let done = HostVolume {
        path: target.clone(),
        read_only: v.read_only,
        kind: VolumeKind::Csi,
    };
    let set_up_failed = |reason: String| {
        format!(
            "MountVolume.SetUp failed for volume {:?} : {reason}",
            v.spec_name
        )
    };
    let mount_device_failed = |reason: String| {
        format!(
            "MountVolume.MountDevice failed for volume {:?} : {reason}",
            v.spec_name
        )
    };
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let unique = unique_name(&v.driver, &v.handle);
    let attachment = attachment_name(&v.handle, &v.driver, &host.node_name);
    // In use from the moment the pod wants it (and again after an agent restart, for what
    // is mounted), until its teardown.
    if v.lifecycle == PERSISTENT {
        host.in_use.add(&unique, uid);
    }
    if v.block {
        return block::set_up(pod, pod_dir, v, objects, host, m, &attachment)
            .await
            .map(SetUp::from);
    }
    let published = {
        let (m, t) = (m.clone(), target.clone());
        blocking(move || mounted(&m, &t)).await.unwrap_or(false)
    };
    if published && !requires_republish(objects, &v.driver).await {
        return Ok(done.into());
    }
    let work = async {
        let Prepared {
            client,
            csi_driver,
            publish_context,
            caps,
        } = prepare(v, objects, host, &attachment, Step::Mount).await?;
        let csi_driver = csi_driver.as_deref();
        let rpc_failed = |e: CsiError| e.to_string();
        let group = if v.read_only {
            None
        } else {
            super::ownership::fs_group(pod).ok().flatten()
        };
        let cap = capability(v, &caps, group);

        // Stage.
        let mut staging = None;
        if v.lifecycle == PERSISTENT && caps.stage_unstage {
            let path = staging_path(&host.root_dir, &v.driver, &v.handle);
            let data = StagedData {
                driver_name: v.driver.clone(),
                volume_handle: v.handle.clone(),
            };
            let staged = {
                let (m, p) = (m.clone(), path.clone());
                blocking(move || -> std::io::Result<bool> {
                    if mounted(&m, &p) {
                        return Ok(true);
                    }
                    crate::data_dirs::ensure_private_dir(p.parent().unwrap_or(&p))?;
                    std::fs::create_dir_all(&p)?;
                    write_json(p.parent().unwrap_or(&p), &data)?;
                    Ok(false)
                })
                .await
                .unwrap_or_else(|| Err(std::io::Error::other("the blocking thread was lost")))
                .map_err(|e| {
                    (
                        mount_device_failed(format!(
                            "{LOG_PREFIX}attacher.MountDevice failed to create dir {:?}: {e}",
                            path.display().to_string()
                        )),
                        false,
                    )
                })?
            };
            if !staged {
                // A Secret that cannot be read may be a moment away (upstream: transient).
                let secrets = credentials(objects, "NodeStageSecretRef", &v.stage_secret)
                    .await
                    .map_err(|e| (mount_device_failed(e.to_string()), true))?;
                let req = pb::NodeStageVolumeRequest {
                    volume_id: v.handle.clone(),
                    publish_context: publish_context.clone(),
                    staging_target_path: path.to_string_lossy().into_owned(),
                    volume_capability: Some(cap.clone()),
                    secrets,
                    volume_context: v.attributes.clone().into_iter().collect(),
                };
                if let Err(e) = client.stage(req).await {
                    warn!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, error = %e, "NodeStageVolume failed");
                    return Err((mount_device_failed(rpc_failed(e)), false));
                }
                info!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, path = %path.display(), "CSI volume staged");
            }
            staging = Some(path);
        }

        // Publish.
        let data = PublishedData {
            attachment_id: attachment,
            driver_name: v.driver.clone(),
            node_name: host.node_name.clone(),
            spec_vol_id: v.spec_name.clone(),
            volume_handle: v.handle.clone(),
            volume_lifecycle_mode: v.lifecycle.to_string(),
        };
        {
            let (dir, volumes) = (spec_dir.clone(), pod_dir.join("volumes"));
            blocking(move || -> std::io::Result<()> {
                crate::data_dirs::ensure_private_dir(&volumes)?;
                crate::data_dirs::ensure_private_dir(&volumes.join(CSI_PLUGIN))?;
                write_json(&dir, &data)
            })
            .await
            .unwrap_or_else(|| Err(std::io::Error::other("the blocking thread was lost")))
            .map_err(|e| {
                (
                    set_up_failed(format!(
                        "{LOG_PREFIX}mounter.SetUpAt failed to save volume info data: {e}"
                    )),
                    false,
                )
            })?;
        }
        let mut context: HashMap<String, String> = v.attributes.clone().into_iter().collect();
        if csi_driver.and_then(|d| d.spec.pod_info_on_mount) == Some(true) {
            context.extend(pod_info(pod, v.lifecycle));
        }
        if let Some(requests) = csi_driver
            .and_then(|d| d.spec.token_requests.as_deref())
            .filter(|r| !r.is_empty())
        {
            let tokens = service_account_tokens(pod, requests, objects)
                .await
                .map_err(|e| (set_up_failed(e.to_string()), true))?;
            context.insert(TOKENS_KEY.into(), tokens);
        }
        let secrets = credentials(objects, "NodePublishSecretRef", &v.publish_secret)
            .await
            .map_err(|e| (set_up_failed(e.to_string()), true))?;
        let req = pb::NodePublishVolumeRequest {
            volume_id: v.handle.clone(),
            publish_context,
            staging_target_path: staging
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            target_path: target.to_string_lossy().into_owned(),
            volume_capability: Some(cap),
            readonly: v.read_only,
            secrets,
            volume_context: context,
        };
        if let Err(e) = client.publish(req).await {
            warn!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, error = %e, "NodePublishVolume failed");
            // As upstream: a finished failure leaves no mount folder (the driver may have made
            // it); vol_data.json stays for the teardown to find the volume.
            let (m, t) = (m.clone(), target.clone());
            blocking(move || {
                if !mounted(&m, &t) {
                    let _ = std::fs::remove_dir(&t);
                }
            })
            .await;
            return Err((set_up_failed(rpc_failed(e)), false));
        }
        // After every NodePublish, a requiresRepublish pass's too, as upstream's SetUpAt
        // (its remount of such a volume is a new SetUp). The containers are running then and
        // can swap what the walk lists; the walk goes by descriptor and never follows a link
        // (`fs_group`), so the worst they get is their own files re-grouped; a pod that does
        // not want the re-walk asks for OnRootMismatch.
        if let Some(g) =
            group.filter(|_| !caps.volume_mount_group && applies_fs_group(v, csi_driver))
        {
            let policy = super::fs_group::change_policy(pod).map_err(|e| {
                (
                    set_up_failed(format!("securityContext.fsGroupChangePolicy: {e}")),
                    false,
                )
            })?;
            let t = target.clone();
            let r = blocking(move || super::fs_group::apply(&t, g, policy)).await;
            match r {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Err((set_up_failed(format!("applying fsGroup {g}: {e}")), false))
                }
                None => {
                    return Err((
                        set_up_failed(format!(
                            "applying fsGroup {g} to {}: the blocking thread was lost",
                            target.display()
                        )),
                        false,
                    ))
                }
            }
        }
        info!(pod = pod_name, volume = %v.spec_name, driver = %v.driver, path = %target.display(), read_only = v.read_only, republished = published, "CSI volume published");
        Ok(())
    };
    match work.await {
        Ok(()) => Ok(done.into()),
        // As upstream's failed remount: the volume stays mounted and the pod runs on.
        Err((message, _)) if published => Ok(SetUp {
            volume: done,
            republish_failed: Some(message),
        }),
        Err(e) => Err(e),
    }
}

/// What every CSI set-up needs first: the registered driver's client, its CSIDriver, the
/// attachment's publish context (waited for when the driver needs attaching) and the
/// driver's node capabilities.
struct Prepared {
    client: DriverClient,
    csi_driver: Option<Arc<CSIDriver>>,
    publish_context: HashMap<String, String>,
    caps: NodeCapabilities,
}

/// Which of upstream's operations a set-up is, for its words: a file system volume's mount
/// (MountVolume.MountDevice, then MountVolume.SetUp) or a raw block volume's map
/// (MapVolume.SetUpDevice, then MapVolume.MapPodDevice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Mount,
    Map,
}

impl Step {
    /// The words of a failure while staging (or before).
    fn stage_failed(self, v: &CsiVolume, reason: String) -> String {
        let op = match self {
            Step::Mount => "MountVolume.MountDevice",
            Step::Map => "MapVolume.SetUpDevice",
        };
        format!("{op} failed for volume {:?} : {reason}", v.spec_name)
    }
    /// The words of a failure while publishing.
    fn publish_failed(self, v: &CsiVolume, reason: String) -> String {
        let op = match self {
            Step::Mount => "MountVolume.SetUp",
            Step::Map => "MapVolume.MapPodDevice",
        };
        format!("{op} failed for volume {:?} : {reason}", v.spec_name)
    }
}

async fn prepare(
    v: &CsiVolume,
    objects: &dyn ClusterObjects,
    host: &CsiHost,
    attachment: &str,
    step: Step,
) -> Result<Prepared, (String, bool)> {
    let Some(driver) = host.drivers.get(&v.driver) else {
        let reason = format!(
            "driver name {} not found in the list of registered CSI drivers",
            v.driver
        );
        // Upstream treats a driver that has not registered yet as transient.
        return Err(if step == Step::Map {
            (
                step.stage_failed(
                    v,
                    format!(
                        "{LOG_PREFIX}blockMapper.SetUpDevice failed to get CSI client: {reason}"
                    ),
                ),
                true,
            )
        } else if v.lifecycle == PERSISTENT {
            (
                step.stage_failed(
                    v,
                    format!("{LOG_PREFIX}attacher.MountDevice failed to create newCsiDriverClient: {reason}"),
                ),
                true,
            )
        } else {
            (
                step.publish_failed(
                    v,
                    format!("{LOG_PREFIX}mounter.SetUpAt failed to get CSI client: {reason}"),
                ),
                true,
            )
        });
    };
    let csi_driver = objects.csi_driver(&v.driver).await.map_err(|e| {
        (
            step.publish_failed(
                v,
                format!("{LOG_PREFIX}failed to read CSIDriver {}: {e}", v.driver),
            ),
            true,
        )
    })?;
    let modes = csi_driver
        .as_deref()
        .and_then(|d| d.spec.volume_lifecycle_modes.clone())
        .unwrap_or_else(|| vec![PERSISTENT.into()]);
    if !modes.iter().any(|m| m == v.lifecycle) {
        return Err((
            step.publish_failed(
                v,
                format!(
                    "{LOG_PREFIX}mounter.SetupAt failed to check volume lifecycle mode: volume mode {:?} not supported by driver {} (only supports {:?})",
                    v.lifecycle, v.driver, modes
                ),
            ),
            false,
        ));
    }
    let client = DriverClient::new(&driver.endpoint);

    // Attach: the controller's VolumeAttachment, waited for.
    let mut publish_context = HashMap::new();
    let attach_required = csi_driver
        .as_deref()
        .and_then(|d| d.spec.attach_required)
        .unwrap_or(true);
    if v.lifecycle == PERSISTENT && attach_required {
        let va = objects.volume_attachment(attachment).await;
        let status = va.as_ref().ok().and_then(|va| va.status.clone());
        match status {
            Some(s) if s.attached => {
                publish_context.extend(s.attachment_metadata.unwrap_or_default());
            }
            other => {
                let why = match (&va, other.and_then(|s| s.attach_error)) {
                    (_, Some(err)) => format!(
                        "attachment {attachment} failed: {}",
                        err.message.unwrap_or_default()
                    ),
                    (Err(e), _) if !e.is_not_found() => {
                        format!("cannot read VolumeAttachment {attachment}: {e}")
                    }
                    _ => format!("volume {} is not attached to this node yet (VolumeAttachment {attachment})", v.spec_name),
                };
                return Err((
                    format!(
                        "Unable to attach or mount volumes: unmounted volumes=[{0}], unattached volumes=[{0}]: {why}",
                        v.pod_volume
                    ),
                    true,
                ));
            }
        }
    }
    let caps = client
        .node_capabilities()
        .await
        .map_err(|e| (step.stage_failed(v, e.to_string()), true))?;
    Ok(Prepared {
        client,
        csi_driver,
        publish_context,
        caps,
    })
}

/// Unpublishes the pod's CSI volumes and unstages those no other pod uses, from their
/// `vol_data.json`; the folders go once the driver is done. Idempotent; an error leaves the
/// volume for the next try.
pub(super) async fn tear_down(
    pod_dir: &Path,
    host: &CsiHost,
    m: Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    block::tear_down(pod_dir, host, &m).await?;
    let dir = pod_dir.join("volumes").join(CSI_PLUGIN);
    let entries: Vec<PathBuf> = {
        let d = dir.clone();
        blocking(move || {
            std::fs::read_dir(&d)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect()
                })
                .unwrap_or_default()
        })
        .await
        .unwrap_or_default()
    };
    let uid = pod_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for spec_dir in entries {
        tear_down_one(&spec_dir, pod_dir, &uid, host, &m).await?;
    }
    Ok(())
}

fn csi_teardown(volume: &Path, reason: String) -> VolumeError {
    VolumeError::TearDown {
        op: "unpublish CSI volume",
        path: volume.to_path_buf(),
        source: std::io::Error::other(reason),
    }
}

async fn tear_down_one(
    spec_dir: &Path,
    pod_dir: &Path,
    uid: &str,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    let target = spec_dir.join(MOUNT_DIR);
    let data: Option<PublishedData> = {
        let d = spec_dir.to_path_buf();
        blocking(move || read_json(&d).ok()).await.flatten()
    };
    let is_mounted = {
        let (m, t) = (m.clone(), target.clone());
        blocking(move || mounted(&m, &t)).await.unwrap_or(true)
    };
    let Some(data) = data else {
        if is_mounted {
            return Err(csi_teardown(
                &target,
                format!("mounted, but {VOL_DATA} is missing or unreadable: the driver is unknown"),
            ));
        }
        // Nothing mounted and nothing known: only folders to remove.
        let d = spec_dir.to_path_buf();
        blocking(move || std::fs::remove_dir_all(&d)).await;
        return Ok(());
    };
    let driver = host.drivers.get(&data.driver_name);
    match (&driver, is_mounted) {
        (Some(d), _) => {
            // Even when nothing is mounted: the driver may keep state (an inline volume's
            // data) that only NodeUnpublishVolume releases.
            DriverClient::new(&d.endpoint)
                .unpublish(&data.volume_handle, &target)
                .await
                .map_err(|e| csi_teardown(&target, format!("NodeUnpublishVolume: {e}")))?;
            info!(pod = uid, volume = %data.spec_vol_id, driver = %data.driver_name, "CSI volume unpublished");
        }
        (None, true) => {
            return Err(csi_teardown(
                &target,
                format!(
                    "driver name {} not found in the list of registered CSI drivers",
                    data.driver_name
                ),
            ));
        }
        (None, false) => {}
    }
    {
        let (m, t) = (m.clone(), target.clone());
        if blocking(move || mounted(&m, &t)).await.unwrap_or(true) {
            return Err(csi_teardown(
                &target,
                "still mounted after NodeUnpublishVolume".into(),
            ));
        }
    }
    if data.volume_lifecycle_mode != EPHEMERAL {
        unstage_if_unused(&data, pod_dir, host, m).await?;
        host.in_use
            .remove(&unique_name(&data.driver_name, &data.volume_handle), uid);
    }
    let d = spec_dir.to_path_buf();
    blocking(move || {
        let _ = std::fs::remove_dir(d.join(MOUNT_DIR));
        let _ = std::fs::remove_file(d.join(VOL_DATA));
        std::fs::remove_dir(&d)
    })
    .await;
    Ok(())
}

/// Whether another pod's folder on this node publishes the same volume.
fn published_elsewhere(root_dir: &Path, this_pod: &Path, driver: &str, handle: &str) -> bool {
    let Ok(pods) = std::fs::read_dir(root_dir.join("pods")) else {
        return false;
    };
    pods.flatten()
        .map(|p| p.path())
        .filter(|p| p != this_pod)
        .filter_map(|p| std::fs::read_dir(p.join("volumes").join(CSI_PLUGIN)).ok())
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| read_json::<PublishedData>(&e.path()).ok())
        .any(|d| d.driver_name == driver && d.volume_handle == handle)
}

async fn unstage_if_unused(
    data: &PublishedData,
    pod_dir: &Path,
    host: &CsiHost,
    m: &Arc<dyn Mounter>,
) -> Result<(), VolumeError> {
    let staging = staging_path(&host.root_dir, &data.driver_name, &data.volume_handle);
    let (root, this, drv, handle, s) = (
        host.root_dir.clone(),
        pod_dir.to_path_buf(),
        data.driver_name.clone(),
        data.volume_handle.clone(),
        staging.clone(),
    );
    let (exists, elsewhere) = blocking(move || {
        (
            std::fs::symlink_metadata(&s).is_ok(),
            published_elsewhere(&root, &this, &drv, &handle),
        )
    })
    .await
    .unwrap_or((true, true));
    if !exists || elsewhere {
        return Ok(());
    }
    let Some(driver) = host.drivers.get(&data.driver_name) else {
        let (m, s) = (m.clone(), staging.clone());
        if blocking(move || mounted(&m, &s)).await.unwrap_or(true) {
            return Err(csi_teardown(
                &staging,
                format!(
                    "cannot unstage: driver name {} not found in the list of registered CSI drivers",
                    data.driver_name
                ),
            ));
        }
        remove_staging(&staging).await;
        return Ok(());
    };
    DriverClient::new(&driver.endpoint)
        .unstage(&data.volume_handle, &staging)
        .await
        .map_err(|e| csi_teardown(&staging, format!("NodeUnstageVolume: {e}")))?;
    info!(volume = %data.spec_vol_id, driver = %data.driver_name, "CSI volume unstaged");
    remove_staging(&staging).await;
    Ok(())
}

async fn remove_staging(staging: &Path) {
    let s = staging.to_path_buf();
    blocking(move || {
        let _ = std::fs::remove_dir(&s);
        if let Some(parent) = s.parent() {
            let _ = std::fs::remove_file(parent.join(VOL_DATA));
            let _ = std::fs::remove_dir(parent);
        }
    })
    .await;
}

mod block;

/// Inline `csi` volumes: published by their driver before the blocking pass (`set_up`), which
/// reads the outcome.
pub(super) struct Inline;

impl VolumeSource for Inline {
    fn field(&self) -> &'static str {
        "csi"
    }

    fn set_up(&self, cx: &source::SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        cx.fetched.csi_outcome(&vol.name).unwrap_or_else(|| {
            Err(cx
                .blame
                .failed("the CSI volume was not set up before this pass".into()))
        })
    }

    fn plugin_of_spec(&self, vol: &Volume) -> Option<String> {
        let driver = &vol.csi.as_ref()?.driver;
        Some(format!("{}:{driver}", VolumeKind::Csi.plugin_name()))
    }
}

#[cfg(test)]
mod tests;
