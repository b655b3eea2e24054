//! Pod volumes on the node: emptyDir (on disk, or a tmpfs with medium Memory), hostPath
//! (with upstream's type checks), configMap, secret, downwardAPI and projected volumes
//! (configMap, secret, downwardAPI and serviceAccountToken sources), and the bind mounts a
//! container's volumeMounts turn into.
//!
//! Layout and media, as upstream's (tools and habits rely on them):
//! `<pod_dir>/volumes/kubernetes.io~empty-dir/<name>`, `…/kubernetes.io~configmap/<name>`
//! (on disk), `…/kubernetes.io~secret/<name>`, `…/kubernetes.io~downward-api/<name>` and
//! `…/kubernetes.io~projected/<name>` (each a tmpfs: their content never touches the disk);
//! a hostPath stays where it is on the host.
//!
//! The cycle: [`setup_pod_volumes`] before the pod's containers start and again on every
//! sync: it reads what the volumes reference through the `ClusterObjects` seam and rewrites
//! a volume (atomically, by the `..data` symlink swap) only when its content, modes or owners
//! changed, so ConfigMap and Secret changes and renewed tokens reach running containers.
//! A subPath mount is bound to the file (or directory) of the version current when its
//! container started (see `mounts` and `subpath`: the agent opens it without following
//! symlinks and bind-mounts the descriptor under `<pod_dir>/volume-subpaths`), so, as
//! upstream, it does not follow updates.
//! [`container_mounts`] for each container's spec, [`teardown_pod_volumes`] once the pod's
//! containers are gone.
//!
//! persistentVolumeClaim and generic `ephemeral` volumes resolve to their bound
//! PersistentVolume (`persistent`): in-tree `local` and `hostPath` ones are served, CSI ones
//! through their driver (`csi`); with `volumeMode: Block` (local and CSI) they are raw block
//! volumes, mapped for the containers' volumeDevices (`block`, [`container_devices`]).
//! Network volumes, clusterTrustBundle and podCertificate projections are refused with an
//! error naming the volume and its kind. Not done yet: SELinux
//! relabelling, emptyDir sizeLimit on disk (upstream enforces it by eviction), hugepages
//! media, fsGroup on emptyDir and hostPath (upstream leaves hostPath alone too).

mod atomic_writer;
mod block;
pub mod csi;
mod downward;
mod empty_dir;
mod error;
mod fetch;
mod fs_group;
mod host_path;
mod loop_lock;
mod mounter;
mod mounts;
mod object_files;
mod ownership;
mod persistent;
mod projected;
mod subpath;
mod teardown;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};
use tracing::{debug, info, warn};

use crate::objects::{ClusterObjects, ObjectError, ObjectKind};

pub use block::container_devices;
pub use downward::{format_map, go_quote, resource_value};
pub use error::VolumeError;
pub use mounts::container_mounts;

use mounter::{Mounter, SysMounter};

pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";
pub const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";

/// What the node knows that volume content depends on.
#[derive(Debug, Clone, Default)]
pub struct DownwardContext {
    /// Kept for the env-style fields; upstream lets volume files show only metadata
    /// fields (name, namespace, uid, labels, annotations), so volumes do not read these.
    pub node_name: String,
    pub host_ip: String,
    pub pod_ips: Vec<String>,
    /// The node's allocatable resources: the value of a limit a container leaves unset
    /// (resourceFieldRef), and the ceiling of memory-backed volumes.
    pub allocatable: Allocatable,
}

/// Node allocatable (capacity minus reservations); None when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocatable {
    pub cpu_millis: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub ephemeral_storage_bytes: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeKind {
    EmptyDir,
    /// emptyDir with medium Memory: a tmpfs.
    EmptyDirMemory,
    HostPath,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    /// A `local` PersistentVolume, bind-mounted into the pod's dir.
    Local,
    /// A CSI volume, published by its driver into the pod's dir.
    Csi,
    /// A raw block volume of an in-tree `local` PV (volumeMode Block): `path` is the pod's
    /// link to the device, `<pod>/volumeDevices/kubernetes.io~local-volume/<pv>`.
    LocalBlock,
    /// A raw block volume of a CSI PV: `path` is the pod's link to the device,
    /// `<pod>/volumeDevices/kubernetes.io~csi/<pv>`.
    CsiBlock,
}

impl VolumeKind {
    /// A raw block volume, for containers' volumeDevices.
    pub fn is_block(self) -> bool {
        matches!(self, VolumeKind::LocalBlock | VolumeKind::CsiBlock)
    }
}

/// One volume as it exists on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    pub path: PathBuf,
    /// Read-only by nature (configMap, secret, downwardAPI, projected): every mount of it is
    /// read-only.
    pub read_only: bool,
    pub kind: VolumeKind,
}

/// Where each volume of a pod lives on the host, by volume name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// The pod as errors name it (`name_namespace(uid)`).
    pod: String,
    /// The pod's dir: subPath mounts are bound under its `volume-subpaths`.
    pod_dir: PathBuf,
    volumes: BTreeMap<String, HostVolume>,
    /// Volumes set up earlier whose refresh failed this time (their object deleted or
    /// unreadable, a key gone): they keep their last content, as upstream keeps a mounted
    /// volume whose remount fails, so the pod runs on; the caller reports them.
    stale: Vec<StaleVolume>,
}

/// A volume that kept its last content because refreshing it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleVolume {
    pub volume: String,
    /// The FailedMount event's message (`VolumeError::event_message`).
    pub event_message: String,
    /// The whole error, naming the pod, for the log.
    pub error: String,
}

impl PodVolumes {
    pub fn new(pod: impl Into<String>, pod_dir: impl Into<PathBuf>) -> Self {
        PodVolumes {
            pod: pod.into(),
            pod_dir: pod_dir.into(),
            volumes: BTreeMap::new(),
            stale: Vec::new(),
        }
    }
    /// The volumes whose refresh failed this time (see `StaleVolume`).
    pub fn stale(&self) -> &[StaleVolume] {
        &self.stale
    }
    pub fn insert(&mut self, name: impl Into<String>, v: HostVolume) {
        self.volumes.insert(name.into(), v);
    }
    pub fn get(&self, name: &str) -> Option<&HostVolume> {
        self.volumes.get(name)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostVolume)> {
        self.volumes.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub fn names(&self) -> Vec<&str> {
        self.volumes.keys().map(String::as_str).collect()
    }
    pub fn pod(&self) -> &str {
        &self.pod
    }
    pub fn pod_dir(&self) -> &Path {
        &self.pod_dir
    }
}

/// Sets up every volume of `pod` under `pod_dir` and says where each is. Idempotent: a
/// tmpfs already mounted stays (with its data), a directory is reused, configMap, secret,
/// downwardAPI and projected files are rewritten (atomically, by a `..data` symlink swap)
/// only when their content, mode or owner changed. The objects the volumes reference are
/// read first from `objects`; the file work and the mount syscalls then run on a blocking
/// thread.
pub async fn setup_pod_volumes(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &DownwardContext,
    objects: &dyn ClusterObjects,
    csi: &csi::CsiHost,
) -> Result<PodVolumes, VolumeError> {
    setup_with(pod, pod_dir, ctx, objects, csi, Arc::new(SysMounter)).await
}

async fn setup_with(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &DownwardContext,
    objects: &dyn ClusterObjects,
    csi_host: &csi::CsiHost,
    m: Arc<dyn Mounter>,
) -> Result<PodVolumes, VolumeError> {
    let mut fetched = fetch::fetch(pod, &ctx.node_name, objects).await;
    fetched.root_dir = csi_host.root_dir.clone();
    // The CSI drivers' calls are async: made now, their outcomes read by the blocking pass.
    csi::set_up(pod, pod_dir, &mut fetched, objects, csi_host, m.clone()).await;
    let (pod, pod_dir, ctx) = (pod.clone(), pod_dir.to_path_buf(), ctx.clone());
    tokio::task::spawn_blocking(move || setup(&pod, &pod_dir, &ctx, &fetched, m.as_ref()))
        .await
        .map_err(|e| VolumeError::Worker(e.to_string()))?
}

/// Unmounts the pod's subPath bind mounts (`<pod_dir>/volume-subpaths`), its memory-backed
/// volumes (and anything else mounted under its volumes dir) and removes both dirs, never following a symlink or crossing a mount, so
/// hostPath content is never touched. Idempotent; an error means "retry later" and leaves
/// whatever could not be unmounted in place.
pub async fn teardown_pod_volumes(pod_dir: &Path, csi: &csi::CsiHost) -> Result<(), VolumeError> {
    // The drivers first: they unmount what they mounted, and may keep state to release.
    csi::tear_down(pod_dir, csi, Arc::new(SysMounter)).await?;
    let (pod_dir, root_dir) = (pod_dir.to_path_buf(), csi.root_dir.clone());
    tokio::task::spawn_blocking(move || {
        block::tear_down_local(&pod_dir, &root_dir, &SysMounter)?;
        teardown::teardown(&pod_dir, &SysMounter)
    })
    .await
    .map_err(|e| VolumeError::Worker(e.to_string()))?
}

fn pod_display(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or(""),
        m.namespace.as_deref().unwrap_or("default"),
        m.uid.as_deref().unwrap_or("")
    )
}

/// Upstream requires volume names to be DNS-1123 labels; here it also keeps a name from
/// escaping the pod dir, since the name is a path element.
fn check_volume_name(name: &str) -> Result<(), String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if name.len() <= 63 && ok_chars && ok_ends {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid volume name (a DNS-1123 label: lowercase letters, digits \
             and '-', at most 63, starting and ending with a letter or digit)"
        ))
    }
}

/// The source fields set on a volume (or a projection), by their API names.
fn set_fields<T: serde::Serialize>(v: &T) -> Vec<String> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(m)) => m
            .into_iter()
            .filter(|(k, v)| k != "name" && !v.is_null())
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    }
}

fn unsupported_hint(kind: &str) -> &'static str {
    match kind {
        "Block" => " (raw block volumes are served from in-tree local and CSI volumes only)",
        "clusterTrustBundle" | "podCertificate" => {
            " (this projection is not implemented by this agent yet)"
        }
        _ => "",
    }
}

/// Errors of one volume, each naming the pod and the volume.
struct Blame<'a> {
    pod: &'a str,
    volume: &'a str,
}

impl Blame<'_> {
    fn invalid(&self, field: &str, reason: String) -> VolumeError {
        VolumeError::Invalid {
            pod: self.pod.to_string(),
            volume: self.volume.to_string(),
            field: field.to_string(),
            reason,
        }
    }
    fn failed(&self, reason: String) -> VolumeError {
        VolumeError::SetUp {
            pod: self.pod.to_string(),
            volume: self.volume.to_string(),
            reason,
        }
    }
    fn object(&self, source: Arc<ObjectError>) -> VolumeError {
        VolumeError::Object {
            pod: self.pod.to_string(),
            volume: self.volume.to_string(),
            source,
        }
    }
    fn unsupported(&self, kind: &str) -> VolumeError {
        VolumeError::Unsupported {
            pod: self.pod.to_string(),
            volume: self.volume.to_string(),
            kind: kind.to_string(),
            hint: unsupported_hint(kind.rsplit(['.', ' ']).next().unwrap_or(kind)).to_string(),
        }
    }
    /// A reference the fetch did not read: fetch and set-up disagree on the spec.
    fn not_read(&self, kind: ObjectKind, name: &str) -> VolumeError {
        self.failed(format!("{kind} {name:?} was not read before the set-up"))
    }
    fn files(&self, e: object_files::FilesError) -> VolumeError {
        match e {
            object_files::FilesError::Field(f, r) => self.invalid(&f, r),
            object_files::FilesError::MissingKey(m) => self.failed(m),
        }
    }
}

pub(crate) fn setup(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &DownwardContext,
    fetched: &fetch::Fetched,
    m: &dyn Mounter,
) -> Result<PodVolumes, VolumeError> {
    let pod_name = pod_display(pod);
    let mut out = PodVolumes::new(pod_name.clone(), pod_dir);
    let mut seen = BTreeSet::new();
    for (i, vol) in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let blame = Blame {
            pod: &pod_name,
            volume: &vol.name,
        };
        check_volume_name(&vol.name)
            .map_err(|r| blame.invalid(&format!("volumes[{i}].name"), r))?;
        if !seen.insert(vol.name.clone()) {
            return Err(blame.invalid(
                &format!("volumes[{i}].name"),
                "duplicate volume name".into(),
            ));
        }
        let hv = match crate::metrics::storage::mount(pod, vol, || {
            setup_volume(pod, &blame, pod_dir, ctx, fetched, vol, m)
        }) {
            Ok(hv) => hv,
            Err(e) => match set_up_before(vol, pod_dir) {
                Some(hv) => {
                    out.stale.push(StaleVolume {
                        volume: vol.name.clone(),
                        event_message: e.event_message(),
                        error: e.to_string(),
                    });
                    hv
                }
                None => return Err(e),
            },
        };
        if let Some(e) = fetched.csi_republish_failure(&vol.name) {
            out.stale.push(StaleVolume {
                volume: vol.name.clone(),
                event_message: e.event_message(),
                error: e.to_string(),
            });
        }
        out.insert(vol.name.clone(), hv);
    }
    Ok(out)
}

/// A volume the atomic writer filled on an earlier pass (or before an agent restart): its
/// `..data` link exists. Only those can go on with their last content.
fn set_up_before(vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
    let (plugin, kind) = if vol.config_map.is_some() {
        (CONFIG_MAP_PLUGIN, VolumeKind::ConfigMap)
    } else if vol.secret.is_some() {
        (SECRET_PLUGIN, VolumeKind::Secret)
    } else if vol.projected.is_some() {
        (PROJECTED_PLUGIN, VolumeKind::Projected)
    } else if vol.downward_api.is_some() {
        (DOWNWARD_API_PLUGIN, VolumeKind::DownwardApi)
    } else {
        return None;
    };
    let path = pod_dir.join("volumes").join(plugin).join(&vol.name);
    std::fs::symlink_metadata(path.join(atomic_writer::DATA_LINK)).ok()?;
    Some(HostVolume {
        path,
        read_only: true,
        kind,
    })
}

fn setup_volume(
    pod: &Pod,
    blame: &Blame<'_>,
    pod_dir: &Path,
    ctx: &DownwardContext,
    fetched: &fetch::Fetched,
    vol: &Volume,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    let name = vol.name.as_str();
    let kinds = set_fields(vol);
    if kinds.len() > 1 {
        return Err(blame.invalid(
            "volume source",
            format!("more than one source set: {}", kinds.join(", ")),
        ));
    }
    let volumes_dir = pod_dir.join("volumes");
    // `<pod>/volumes/<plugin>`, closed to other users as upstream makes them (0750): the
    // volume folders below are 0777 or hold world-readable secret files.
    let plugin_dir = |plugin: &str| -> Result<PathBuf, VolumeError> {
        let dir = volumes_dir.join(plugin);
        crate::data_dirs::ensure_private_dir(&volumes_dir)
            .and_then(|()| crate::data_dirs::ensure_private_dir(&dir))
            .map_err(|e| blame.failed(e.to_string()))?;
        Ok(dir)
    };
    let ownership = || {
        ownership::fs_group(pod)
            .map(|fs_group| ownership::Ownership { fs_group })
            .map_err(|r| blame.invalid("securityContext.fsGroup", r))
    };
    let default_mode = |field: &str, mode: Option<i32>| {
        downward::check_mode(mode.unwrap_or(downward::DEFAULT_MODE))
            .map_err(|r| blame.invalid(&format!("{field}.defaultMode"), r))
    };
    let memory = |dir: &Path| {
        let size = empty_dir::memory_size(pod, None, ctx.allocatable.memory_bytes);
        mount_memory(dir, size, m, blame.pod, name)
            .map(drop)
            .map_err(|r| blame.failed(r))
    };
    let read_only = |path: PathBuf, kind: VolumeKind| HostVolume {
        path,
        read_only: true,
        kind,
    };
    // A volume with no source is an emptyDir, as the API defaults it.
    match kinds.first().map(String::as_str).unwrap_or("emptyDir") {
        "emptyDir" => {
            let ed = vol.empty_dir.clone().unwrap_or_default();
            let dir = plugin_dir(EMPTY_DIR_PLUGIN)?.join(name);
            let group = ownership::fs_group(pod)
                .map_err(|r| blame.invalid("securityContext.fsGroup", r))?;
            match ed.medium.as_deref().unwrap_or("") {
                "" => {
                    let new = std::fs::symlink_metadata(&dir).is_err();
                    empty_dir::setup_dir(&dir).map_err(|e| {
                        blame.failed(format!("cannot create {}: {e}", dir.display()))
                    })?;
                    if new {
                        empty_dir_group(&dir, group, blame);
                    }
                    Ok(HostVolume {
                        path: dir,
                        read_only: false,
                        kind: VolumeKind::EmptyDir,
                    })
                }
                "Memory" => {
                    let size = empty_dir::memory_size(
                        pod,
                        ed.size_limit.as_ref().map(|q| q.0.as_str()),
                        ctx.allocatable.memory_bytes,
                    );
                    let new = mount_memory(&dir, size, m, blame.pod, name)
                        .map_err(|r| blame.failed(r))?;
                    if new {
                        empty_dir_group(&dir, group, blame);
                    }
                    Ok(HostVolume {
                        path: dir,
                        read_only: false,
                        kind: VolumeKind::EmptyDirMemory,
                    })
                }
                other => Err(blame.unsupported(&format!("emptyDir medium {other:?}"))),
            }
        }
        "hostPath" => {
            let hp = vol.host_path.clone().unwrap_or_default();
            host_path::check_path(&hp.path).map_err(|r| blame.invalid("hostPath.path", r))?;
            let path = PathBuf::from(&hp.path);
            host_path::check_type(&path, hp.type_.as_deref().unwrap_or(""))
                .map_err(|r| blame.failed(r))?;
            Ok(HostVolume {
                path,
                read_only: false,
                kind: VolumeKind::HostPath,
            })
        }
        "configMap" => {
            let src = vol.config_map.clone().unwrap_or_default();
            if src.name.is_empty() {
                return Err(blame.invalid("configMap.name", "is required".into()));
            }
            let optional = src.optional.unwrap_or(false);
            let mode = default_mode("configMap", src.default_mode)?;
            // The object first, as upstream: a missing one leaves no directory behind.
            let cm = fetched
                .config_map(&src.name, optional)
                .ok_or_else(|| blame.not_read(ObjectKind::ConfigMap, &src.name))?
                .map_err(|e| blame.object(e))?;
            let keys = cm.as_deref().map(object_files::config_map_keys);
            let mut payload = downward::Payload::new();
            object_files::collect(
                ObjectKind::ConfigMap,
                src.items.as_deref(),
                &keys.unwrap_or_default(),
                mode,
                optional,
                "configMap",
                &mut payload,
            )
            .map_err(|e| blame.files(e))?;
            downward::check_nesting(&payload).map_err(|r| blame.invalid("configMap.items", r))?;
            let own = ownership()?;
            let dir = plugin_dir(CONFIG_MAP_PLUGIN)?.join(name);
            empty_dir::setup_dir(&dir)
                .map_err(|e| blame.failed(format!("cannot create {}: {e}", dir.display())))?;
            write_files(&dir, &payload, own, blame)?;
            Ok(read_only(dir, VolumeKind::ConfigMap))
        }
        "secret" => {
            let src = vol.secret.clone().unwrap_or_default();
            let Some(secret_name) = src.secret_name.as_deref().filter(|n| !n.is_empty()) else {
                return Err(blame.invalid("secret.secretName", "is required".into()));
            };
            let optional = src.optional.unwrap_or(false);
            let mode = default_mode("secret", src.default_mode)?;
            let secret = fetched
                .secret(secret_name, optional)
                .ok_or_else(|| blame.not_read(ObjectKind::Secret, secret_name))?
                .map_err(|e| blame.object(e))?;
            let keys = secret.as_deref().map(object_files::secret_keys);
            let mut payload = downward::Payload::new();
            object_files::collect(
                ObjectKind::Secret,
                src.items.as_deref(),
                &keys.unwrap_or_default(),
                mode,
                optional,
                "secret",
                &mut payload,
            )
            .map_err(|e| blame.files(e))?;
            downward::check_nesting(&payload).map_err(|r| blame.invalid("secret.items", r))?;
            let own = ownership()?;
            let dir = plugin_dir(SECRET_PLUGIN)?.join(name);
            memory(&dir)?;
            write_files(&dir, &payload, own, blame)?;
            Ok(read_only(dir, VolumeKind::Secret))
        }
        "downwardAPI" => {
            let src = vol.downward_api.clone().unwrap_or_default();
            let mut payload = downward::Payload::new();
            downward::collect(
                pod,
                src.items.as_deref().unwrap_or(&[]),
                src.default_mode,
                &ctx.allocatable,
                "downwardAPI",
                &mut payload,
            )
            .map_err(|(f, r)| blame.invalid(&f, r))?;
            let own = ownership()?;
            let dir = plugin_dir(DOWNWARD_API_PLUGIN)?.join(name);
            memory(&dir)?;
            write_files(&dir, &payload, own, blame)?;
            Ok(read_only(dir, VolumeKind::DownwardApi))
        }
        "projected" => {
            let src = vol.projected.clone().unwrap_or_default();
            let mode = default_mode("projected", src.default_mode)?;
            let own = ownership()?;
            let payload = projected::collect(pod, &src, mode, own, ctx, fetched, blame)?;
            let dir = plugin_dir(PROJECTED_PLUGIN)?.join(name);
            memory(&dir)?;
            write_files(&dir, &payload, own, blame)?;
            Ok(read_only(dir, VolumeKind::Projected))
        }
        "persistentVolumeClaim" | "ephemeral" => {
            persistent::setup(pod, vol, pod_dir, fetched, blame, m)
        }
        "csi" => fetched.csi_outcome(name).unwrap_or_else(|| {
            Err(blame.failed("the CSI volume was not set up before this pass".into()))
        }),
        other => Err(blame.unsupported(other)),
    }
}

/// A tmpfs at `dir`; true when it was mounted now (false: it was there from an earlier pass
/// or before an agent restart).
fn mount_memory(
    dir: &Path,
    size: Option<i64>,
    m: &dyn Mounter,
    pod: &str,
    volume: &str,
) -> Result<bool, String> {
    let mounted = empty_dir::setup_tmpfs(dir, size, m)
        .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", dir.display()))?;
    if mounted {
        info!(pod, volume, size, path = %dir.display(), "mounted tmpfs volume");
    }
    Ok(mounted)
}

/// The pod's fsGroup on an emptyDir it just got, as upstream's emptyDir SetUpAt: once, when
/// the folder is made (or its tmpfs mounted), whatever the pod's fsGroupChangePolicy (upstream
/// passes none), so what the containers later write keeps the modes they give it. A failure
/// is logged and the volume used as it is, as upstream ignores it too.
fn empty_dir_group(dir: &Path, group: Option<u32>, blame: &Blame<'_>) {
    let Some(group) = group else { return };
    if let Err(e) = fs_group::apply(dir, group, fs_group::ChangePolicy::Always) {
        warn!(pod = blame.pod, volume = blame.volume, group, error = %e, "cannot apply fsGroup to emptyDir");
    }
}

/// The files of a configMap, secret, downwardAPI or projected volume, written by the atomic
/// writer into its (already made) directory.
fn write_files(
    dir: &Path,
    payload: &downward::Payload,
    own: ownership::Ownership,
    blame: &Blame<'_>,
) -> Result<(), VolumeError> {
    let written = atomic_writer::write(dir, payload, own)
        .map_err(|e| blame.failed(format!("cannot write files into {}: {e}", dir.display())))?;
    if written {
        info!(
            pod = blame.pod,
            volume = blame.volume,
            files = payload.len(),
            "wrote volume files"
        );
    } else {
        debug!(
            pod = blame.pod,
            volume = blame.volume,
            "volume files unchanged"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_persistent;
