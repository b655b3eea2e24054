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
mod kind;
mod loop_lock;
mod mounter;
mod mounts;
mod object_files;
mod ownership;
mod persistent;
mod projected;
mod source;
mod subpath;
mod teardown;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};
use tracing::{debug, info};

use crate::objects::{ClusterObjects, ObjectError, ObjectKind};

pub use block::container_devices;
pub use downward::{format_map, go_quote, resource_value};
pub use error::VolumeError;
pub use kind::{Usage, VolumeKind};
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
fn check_volume_name(name: &str) -> Result<(), InvalidName> {
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
        Err(InvalidName(name.to_string()))
    }
}

/// A volume name that is not a DNS-1123 label.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a valid volume name (a DNS-1123 label: lowercase letters, digits \
     and '-', at most 63, starting and ending with a letter or digit)"
)]
struct InvalidName(String);

/// A tmpfs that could not be mounted for a volume.
#[derive(Debug, thiserror::Error)]
#[error("cannot mount a tmpfs at {}: {source}", dir.display())]
struct TmpfsError {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
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
            .map_err(|r| blame.invalid(&format!("volumes[{i}].name"), r.to_string()))?;
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

/// The volume as an earlier pass (or run) left it, where its type lets it go on with that.
fn set_up_before(vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
    let field = set_fields(vol).into_iter().next()?;
    source::source_of(&field)?.set_up_before(vol, pod_dir)
}

/// The volume written by the atomic writer under `plugin` on an earlier pass (or before an
/// agent restart): its `..data` link exists. Only those can go on with their last content.
fn written_before(
    vol: &Volume,
    pod_dir: &Path,
    plugin: &str,
    kind: VolumeKind,
) -> Option<HostVolume> {
    let path = pod_dir.join("volumes").join(plugin).join(&vol.name);
    std::fs::symlink_metadata(path.join(atomic_writer::DATA_LINK)).ok()?;
    Some(HostVolume {
        path,
        read_only: true,
        kind,
    })
}

/// Upstream's plugin name of a volume from its spec, for a set-up that failed before saying
/// its kind; `<n/a>` for claims (named only once followed to their volume) and unknown kinds.
pub fn plugin_of_spec(vol: &Volume) -> String {
    let fields = set_fields(vol);
    source::SOURCES
        .iter()
        .filter(|s| fields.iter().any(|f| f == s.field()))
        .find_map(|s| s.plugin_of_spec(vol))
        .unwrap_or_else(|| "<n/a>".to_string())
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
    let kinds = set_fields(vol);
    if kinds.len() > 1 {
        return Err(blame.invalid(
            "volume source",
            format!("more than one source set: {}", kinds.join(", ")),
        ));
    }
    // A volume with no source is an emptyDir, as the API defaults it.
    let field = kinds.first().map(String::as_str).unwrap_or("emptyDir");
    let Some(source) = source::source_of(field) else {
        return Err(blame.unsupported(field));
    };
    let cx = source::SetUp {
        pod,
        blame,
        pod_dir,
        ctx,
        fetched,
        m,
    };
    source.set_up(&cx, vol)
}

/// A tmpfs at `dir`; true when it was mounted now (false: it was there from an earlier pass
/// or before an agent restart).
fn mount_memory(
    dir: &Path,
    size: Option<i64>,
    m: &dyn Mounter,
    pod: &str,
    volume: &str,
) -> Result<bool, TmpfsError> {
    let mounted = empty_dir::setup_tmpfs(dir, size, m).map_err(|source| TmpfsError {
        dir: dir.to_path_buf(),
        source,
    })?;
    if mounted {
        info!(pod, volume, size, path = %dir.display(), "mounted tmpfs volume");
    }
    Ok(mounted)
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
