//! Pod volumes on the node: emptyDir (on disk, or a tmpfs with medium Memory), hostPath
//! (with upstream's type checks), downwardAPI and projected volumes of downwardAPI items,
//! and the bind mounts a container's volumeMounts turn into.
//!
//! Layout, as upstream's (tools and habits rely on it):
//! `<pod_dir>/volumes/kubernetes.io~empty-dir/<name>`, `…/kubernetes.io~downward-api/<name>`,
//! `…/kubernetes.io~projected/<name>`; a hostPath stays where it is on the host.
//!
//! The cycle: [`setup_pod_volumes`] before the pod's containers start (and again on every
//! sync: it is idempotent and refreshes downwardAPI files), [`container_mounts`] for each
//! container's spec, [`teardown_pod_volumes`] once the pod's containers are gone.
//!
//! Kinds that need the apiserver (configMap, secret, serviceAccountToken, PVCs) and remote
//! storage are refused with an error naming the volume and its kind. Not done yet:
//! fsGroup ownership of volume files, SELinux relabelling, emptyDir sizeLimit on disk
//! (upstream enforces it by eviction), hugepages media.

mod atomic_writer;
mod downward;
mod empty_dir;
mod error;
mod host_path;
mod mounter;
mod mounts;
mod teardown;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};
use tracing::{debug, info};

pub use downward::{format_map, go_quote, resource_value};
pub use error::VolumeError;
pub use mounts::container_mounts;

use mounter::{Mounter, SysMounter};

pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
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
    DownwardApi,
    Projected,
}

/// One volume as it exists on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    pub path: PathBuf,
    /// Read-only by nature (downwardAPI, projected): every mount of it is read-only.
    pub read_only: bool,
    pub kind: VolumeKind,
}

/// Where each volume of a pod lives on the host, by volume name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// The pod as errors name it (`name_namespace(uid)`).
    pod: String,
    volumes: BTreeMap<String, HostVolume>,
}

impl PodVolumes {
    pub fn new(pod: impl Into<String>) -> Self {
        PodVolumes {
            pod: pod.into(),
            volumes: BTreeMap::new(),
        }
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
}

/// Sets up every volume of `pod` under `pod_dir` and says where each is. Idempotent: a
/// tmpfs already mounted stays (with its data), a directory is reused, downwardAPI files
/// are rewritten (atomically, by a `..data` symlink swap) only when their content or mode
/// changed. The file work and the mount syscalls run on a blocking thread.
pub async fn setup_pod_volumes(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &DownwardContext,
) -> Result<PodVolumes, VolumeError> {
    let (pod, pod_dir, ctx) = (pod.clone(), pod_dir.to_path_buf(), ctx.clone());
    tokio::task::spawn_blocking(move || setup(&pod, &pod_dir, &ctx, &SysMounter))
        .await
        .map_err(|e| VolumeError::Worker(e.to_string()))?
}

/// Unmounts the pod's memory-backed volumes (and anything else mounted under its volumes
/// dir) and removes `<pod_dir>/volumes`, never following a symlink or crossing a mount, so
/// hostPath content is never touched. Idempotent; an error means "retry later" and leaves
/// whatever could not be unmounted in place.
pub async fn teardown_pod_volumes(pod_dir: &Path) -> Result<(), VolumeError> {
    let pod_dir = pod_dir.to_path_buf();
    tokio::task::spawn_blocking(move || teardown::teardown(&pod_dir, &SysMounter))
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
        "configMap"
        | "secret"
        | "persistentVolumeClaim"
        | "serviceAccountToken"
        | "clusterTrustBundle"
        | "podCertificate"
        | "ephemeral" => {
            " (it needs objects from the apiserver, which this agent does not read yet)"
        }
        _ => "",
    }
}

pub(crate) fn setup(
    pod: &Pod,
    pod_dir: &Path,
    ctx: &DownwardContext,
    m: &dyn Mounter,
) -> Result<PodVolumes, VolumeError> {
    let pod_name = pod_display(pod);
    let mut out = PodVolumes::new(pod_name.clone());
    let mut seen = BTreeSet::new();
    for (i, vol) in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let invalid = |field: &str, reason: String| VolumeError::Invalid {
            pod: pod_name.clone(),
            volume: vol.name.clone(),
            field: field.to_string(),
            reason,
        };
        check_volume_name(&vol.name).map_err(|r| invalid(&format!("volumes[{i}].name"), r))?;
        if !seen.insert(vol.name.clone()) {
            return Err(invalid(
                &format!("volumes[{i}].name"),
                "duplicate volume name".into(),
            ));
        }
        let hv = setup_volume(pod, &pod_name, pod_dir, ctx, vol, m)?;
        out.insert(vol.name.clone(), hv);
    }
    Ok(out)
}

fn setup_volume(
    pod: &Pod,
    pod_name: &str,
    pod_dir: &Path,
    ctx: &DownwardContext,
    vol: &Volume,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    let name = vol.name.as_str();
    let invalid = |field: &str, reason: String| VolumeError::Invalid {
        pod: pod_name.to_string(),
        volume: name.to_string(),
        field: field.to_string(),
        reason,
    };
    let failed = |reason: String| VolumeError::SetUp {
        pod: pod_name.to_string(),
        volume: name.to_string(),
        reason,
    };
    let unsupported = |kind: &str| VolumeError::Unsupported {
        pod: pod_name.to_string(),
        volume: name.to_string(),
        kind: kind.to_string(),
        hint: unsupported_hint(kind.rsplit('.').next().unwrap_or(kind)).to_string(),
    };
    let kinds = set_fields(vol);
    if kinds.len() > 1 {
        return Err(invalid(
            "volume source",
            format!("more than one source set: {}", kinds.join(", ")),
        ));
    }
    let volumes_dir = pod_dir.join("volumes");
    // A volume with no source is an emptyDir, as the API defaults it.
    match kinds.first().map(String::as_str).unwrap_or("emptyDir") {
        "emptyDir" => {
            let ed = vol.empty_dir.clone().unwrap_or_default();
            let dir = volumes_dir.join(EMPTY_DIR_PLUGIN).join(name);
            match ed.medium.as_deref().unwrap_or("") {
                "" => {
                    empty_dir::setup_dir(&dir)
                        .map_err(|e| failed(format!("cannot create {}: {e}", dir.display())))?;
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
                    mount_memory(&dir, size, m, pod_name, name).map_err(failed)?;
                    Ok(HostVolume {
                        path: dir,
                        read_only: false,
                        kind: VolumeKind::EmptyDirMemory,
                    })
                }
                other => Err(unsupported(&format!("emptyDir medium {other:?}"))),
            }
        }
        "hostPath" => {
            let hp = vol.host_path.clone().unwrap_or_default();
            host_path::check_path(&hp.path).map_err(|r| invalid("hostPath.path", r))?;
            let path = PathBuf::from(&hp.path);
            host_path::check_type(&path, hp.type_.as_deref().unwrap_or("")).map_err(failed)?;
            Ok(HostVolume {
                path,
                read_only: false,
                kind: VolumeKind::HostPath,
            })
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
            .map_err(|(f, r)| invalid(&f, r))?;
            let dir = volumes_dir.join(DOWNWARD_API_PLUGIN).join(name);
            write_files(pod, ctx, &dir, &payload, m, pod_name, name).map_err(failed)?;
            Ok(HostVolume {
                path: dir,
                read_only: true,
                kind: VolumeKind::DownwardApi,
            })
        }
        "projected" => {
            let src = vol.projected.clone().unwrap_or_default();
            let mut payload = downward::Payload::new();
            for (j, s) in src.sources.iter().flatten().enumerate() {
                let field = format!("projected.sources[{j}]");
                let kinds = set_fields(s);
                match kinds.as_slice() {
                    [k] if k == "downwardAPI" => {
                        let items = s
                            .downward_api
                            .as_ref()
                            .and_then(|d| d.items.as_deref())
                            .unwrap_or(&[]);
                        downward::collect(
                            pod,
                            items,
                            src.default_mode,
                            &ctx.allocatable,
                            &format!("{field}.downwardAPI"),
                            &mut payload,
                        )
                        .map_err(|(f, r)| invalid(&f, r))?;
                    }
                    [k] => return Err(unsupported(&format!("{field}.{k}"))),
                    _ => {
                        return Err(invalid(
                            &field,
                            format!("exactly one source per projection (found {})", kinds.len()),
                        ))
                    }
                }
            }
            let dir = volumes_dir.join(PROJECTED_PLUGIN).join(name);
            write_files(pod, ctx, &dir, &payload, m, pod_name, name).map_err(failed)?;
            Ok(HostVolume {
                path: dir,
                read_only: true,
                kind: VolumeKind::Projected,
            })
        }
        other => Err(unsupported(other)),
    }
}

fn mount_memory(
    dir: &Path,
    size: Option<i64>,
    m: &dyn Mounter,
    pod: &str,
    volume: &str,
) -> Result<(), String> {
    let mounted = empty_dir::setup_tmpfs(dir, size, m)
        .map_err(|e| format!("cannot mount a tmpfs at {}: {e}", dir.display()))?;
    if mounted {
        info!(pod, volume, size, path = %dir.display(), "mounted tmpfs volume");
    }
    Ok(())
}

/// downwardAPI and projected volumes: a memory emptyDir holding the files (as upstream
/// wraps them), written by the atomic writer.
fn write_files(
    pod: &Pod,
    ctx: &DownwardContext,
    dir: &Path,
    payload: &downward::Payload,
    m: &dyn Mounter,
    pod_name: &str,
    volume: &str,
) -> Result<(), String> {
    let size = empty_dir::memory_size(pod, None, ctx.allocatable.memory_bytes);
    mount_memory(dir, size, m, pod_name, volume)?;
    let written = atomic_writer::write(dir, payload)
        .map_err(|e| format!("cannot write files into {}: {e}", dir.display()))?;
    if written {
        info!(
            pod = pod_name,
            volume,
            files = payload.len(),
            "wrote volume files"
        );
    } else {
        debug!(pod = pod_name, volume, "volume files unchanged");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
