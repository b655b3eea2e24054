//! Raw block volumes: a claim whose PersistentVolume has `volumeMode: Block`, handed to the
//! containers that list it in `volumeDevices` as a device node, as upstream's volume manager
//! maps it:
//! - the modes must agree (upstream's desired-state populator): a Block volume named in a
//!   container's volumeMounts, or a Filesystem one in its volumeDevices, stops the pod in
//!   ContainerCreating with upstream's words;
//! - the device is "mapped" at upstream's two places (its MapBlockVolume): bind-mounted onto
//!   the file `<global map path>/<pod uid>` (so the node's mount table shows who uses the
//!   device) and linked from `<pod>/volumeDevices/<plugin>/<volume>`, the path the runtime
//!   is given; an in-tree `local` PV's global map path is
//!   `<root>/plugins/kubernetes.io~local-volume/volumeDevices/<pv>`, a CSI one's is the CSI
//!   plugin's (`csi::block`);
//! - every container listing the volume gets the device at its `devicePath` (upstream's
//!   makeBlockVolumes), "mrw" or, for a claim the pod mounts readOnly, "r".
//!
//! - the mapped device is held open for the pod by a loop device over its map file
//!   (upstream's descriptor lock, `loop_lock`), released before the map file is unmounted.
//!
//! Teardown reads only the disk (the pod's links), so an agent restarted, or a pod found
//! after one, is unmapped exactly.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::info;

use super::mounter::Mounter;
use super::persistent::LOCAL_VOLUME_PLUGIN;
use super::{Blame, HostVolume, PodVolumes, VolumeError, VolumeKind};
use crate::pod::spec::DeviceInfo;

/// The pod's folder of device links, and each plugin's folder of global map paths.
pub const VOLUME_DEVICES_DIR: &str = "volumeDevices";

/// The mode a PV without one has: the apiserver defaults `volumeMode` to Filesystem.
const FILESYSTEM: &str = "Filesystem";
pub(super) const BLOCK: &str = "Block";

/// The PV's volumeMode (Filesystem when unset, as the apiserver defaults it).
pub(super) fn volume_mode(pv: &k8s_openapi::api::core::v1::PersistentVolume) -> &str {
    pv.spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or(FILESYSTEM)
}

/// The first container (init, app, then ephemeral, upstream's visiting order) that names a
/// volume in its volumeMounts, and the first that names it in its volumeDevices.
#[derive(Debug, Default)]
pub(super) struct Uses {
    mounts: BTreeMap<String, String>,
    devices: BTreeMap<String, String>,
}

pub(super) fn uses(pod: &Pod) -> Uses {
    let mut out = Uses::default();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    let regular = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| {
            (
                &c.name,
                c.volume_mounts.as_deref(),
                c.volume_devices.as_deref(),
            )
        });
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|c| {
        (
            &c.name,
            c.volume_mounts.as_deref(),
            c.volume_devices.as_deref(),
        )
    });
    for (name, mounts, devices) in regular.chain(ephemeral) {
        for m in mounts.unwrap_or_default() {
            out.mounts
                .entry(m.name.clone())
                .or_insert_with(|| name.clone());
        }
        for d in devices.unwrap_or_default() {
            out.devices
                .entry(d.name.clone())
                .or_insert_with(|| name.clone());
        }
    }
    out
}

impl Uses {
    /// Upstream's check of a claim's volume mode against how the containers use it.
    pub(super) fn check(&self, pod: &str, volume: &str, mode: &str) -> Result<(), VolumeError> {
        let wrong = |container: &String, field: &'static str| VolumeError::VolumeMode {
            pod: pod.to_string(),
            container: container.clone(),
            volume: volume.to_string(),
            mode: mode.to_string(),
            field,
        };
        if let Some(c) = self.mounts.get(volume).filter(|_| mode != FILESYSTEM) {
            return Err(wrong(c, "volumeMounts"));
        }
        if let Some(c) = self.devices.get(volume).filter(|_| mode != BLOCK) {
            return Err(wrong(c, "volumeDevices"));
        }
        Ok(())
    }
}

/// `<root>/plugins/<plugin>/volumeDevices`, upstream's GetVolumeDevicePluginDir.
pub(super) fn plugin_devices_dir(root_dir: &Path, plugin: &str) -> PathBuf {
    root_dir
        .join("plugins")
        .join(plugin)
        .join(VOLUME_DEVICES_DIR)
}

/// The link to the device a container gets: `<pod>/volumeDevices/<plugin>/<name>`.
pub(super) fn pod_device_link(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir.join(VOLUME_DEVICES_DIR).join(plugin).join(name)
}

/// Why a raw block volume could not be mapped for a pod, in upstream's words; the caller
/// names the operation, pod and volume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapError {
    #[error("{0}")]
    Folder(#[source] crate::data_dirs::DataDirError),
    #[error("failed to remove file {}: {source}", link.display())]
    RemoveLink {
        link: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to link {} to {}: {source}", link.display(), device.display())]
    Link {
        link: PathBuf,
        device: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to open file {}: {source}", map_file.display())]
    OpenMapFile {
        map_file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to bind mount devicePath: {} to linkPath {}: {source}", device.display(), map_file.display())]
    Bind {
        device: PathBuf,
        map_file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("blkUtil.AttachFileDevice failed. globalMapPath:{}, podUID: {pod_uid}: {source}", global.display())]
    Lock {
        global: PathBuf,
        pod_uid: String,
        #[source]
        source: io::Error,
    },
}

/// Makes (or re-points) the pod's `link` to `device`, with its folders closed to others as
/// `volumes` is. Idempotent.
pub(super) fn link(device: &Path, link: &Path) -> Result<(), MapError> {
    let link_dir = link.parent().unwrap_or(link);
    if let Some(pod_devices) = link_dir.parent() {
        crate::data_dirs::ensure_private_dir(pod_devices).map_err(MapError::Folder)?;
    }
    crate::data_dirs::ensure_private_dir(link_dir).map_err(MapError::Folder)?;
    if fs::read_link(link).ok().as_deref() == Some(device) {
        return Ok(());
    }
    ignore_missing(fs::remove_file(link)).map_err(|source| MapError::RemoveLink {
        link: link.to_path_buf(),
        source,
    })?;
    std::os::unix::fs::symlink(device, link).map_err(|source| MapError::Link {
        link: link.to_path_buf(),
        device: device.to_path_buf(),
        source,
    })
}

/// Whether the pod's map file in `global` holds the device (the volume is mapped for it).
pub(super) fn is_mapped(global: &Path, pod_uid: &str, m: &dyn Mounter) -> bool {
    m.mounted_fs(&global.join(pod_uid)).ok().flatten().is_some()
}

/// Upstream's MapBlockVolume: `device` linked from `link`, bind-mounted onto the file
/// `<global>/<pod uid>`, and held open by a loop device over that file. The link is made
/// first, so a teardown after a crash in between still finds the bind; the lock is taken
/// on every call, so one a crash left out is taken by the next pass. Idempotent. The error
/// is the reason, for the caller's words.
pub(super) fn map(
    device: &Path,
    global: &Path,
    pod_uid: &str,
    link_path: &Path,
    m: &dyn Mounter,
) -> Result<(), MapError> {
    link(device, link_path)?;
    crate::data_dirs::ensure_private_dir(global).map_err(MapError::Folder)?;
    let map_file = global.join(pod_uid);
    if !is_mapped(global, pod_uid, m) {
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o750)
            .open(&map_file)
            .map_err(|source| MapError::OpenMapFile {
                map_file: map_file.clone(),
                source,
            })?;
        m.bind(device, &map_file).map_err(|source| MapError::Bind {
            device: device.to_path_buf(),
            map_file: map_file.clone(),
            source,
        })?;
    }
    m.lock_device(&map_file)
        .map_err(|source| lock_failed(global, pod_uid, source))
}

/// Upstream's words for a descriptor lock that could not be taken.
pub(super) fn lock_failed(global: &Path, pod_uid: &str, source: io::Error) -> MapError {
    MapError::Lock {
        global: global.to_path_buf(),
        pod_uid: pod_uid.to_string(),
        source,
    }
}

/// The bind on `<global>/<pod uid>` unmounted and its file removed. Idempotent.
pub(super) fn release_map_file(global: &Path, pod_uid: &str, m: &dyn Mounter) -> io::Result<()> {
    let map_file = global.join(pod_uid);
    // The descriptor lock first: the bind cannot be unmounted while a loop device holds it.
    m.unlock_device(&map_file)?;
    // A bind made twice (a crash between the check and the mount) needs one unmount each.
    for _ in 0..8 {
        if m.mounted_fs(&map_file)?.is_none() {
            break;
        }
        m.unmount(&map_file)?;
    }
    if m.mounted_fs(&map_file)?.is_some() {
        return Err(io::Error::other(format!(
            "{} is still mounted",
            map_file.display()
        )));
    }
    ignore_missing(fs::remove_file(&map_file))
}

/// Undoes `map`: the map file, then the link; the global folder goes once no pod's map file
/// is left in it. Idempotent.
pub(super) fn unmap(global: &Path, pod_uid: &str, link: &Path, m: &dyn Mounter) -> io::Result<()> {
    release_map_file(global, pod_uid, m)?;
    ignore_missing(fs::remove_file(link))?;
    // Fails while another pod maps the same device: that pod's file is still there.
    let _ = fs::remove_dir(global);
    Ok(())
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// An in-tree `local` PV with volumeMode Block: its path must be a block device, which is
/// mapped for the pod (upstream's local block mapper: the device is the PV's path, with its
/// symlinks resolved).
#[allow(clippy::too_many_arguments)]
pub(super) fn set_up_local(
    pod_uid: &str,
    pv_name: &str,
    path: &str,
    read_only: bool,
    pod_dir: &Path,
    root_dir: &Path,
    blame: &Blame<'_>,
    m: &dyn Mounter,
) -> Result<HostVolume, VolumeError> {
    super::host_path::check_path(path)
        .map_err(|r| blame.invalid("persistentVolume local.path", r.to_string()))?;
    let failed = |reason: String| VolumeError::Map {
        pod: blame.pod.to_string(),
        volume: blame.volume.to_string(),
        op: "MapPodDevice",
        reason,
    };
    let device = fs::canonicalize(path)
        .map_err(|e| failed(format!("local volume path {path} is not usable: {e}")))?;
    let is_block = fs::metadata(&device).is_ok_and(|md| md.file_type().is_block_device());
    if !is_block {
        return Err(failed(format!(
            "local volume path {path} is not a block device"
        )));
    }
    let global = plugin_devices_dir(root_dir, LOCAL_VOLUME_PLUGIN).join(pv_name);
    let link = pod_device_link(pod_dir, LOCAL_VOLUME_PLUGIN, pv_name);
    let fresh = fs::symlink_metadata(&link).is_err();
    map(&device, &global, pod_uid, &link, m).map_err(|e| VolumeError::Map {
        pod: blame.pod.to_string(),
        volume: blame.volume.to_string(),
        op: "MapBlockVolume",
        reason: e.to_string(),
    })?;
    if fresh {
        info!(pod = blame.pod, volume = pv_name, device = %device.display(), read_only, "mapped local block volume");
    }
    Ok(HostVolume {
        path: link,
        read_only,
        kind: VolumeKind::LocalBlock,
    })
}

/// Unmaps the pod's local block volumes, found by their links. Blocking.
pub(super) fn tear_down_local(
    pod_dir: &Path,
    root_dir: &Path,
    m: &dyn Mounter,
) -> Result<(), VolumeError> {
    let dir = pod_dir.join(VOLUME_DEVICES_DIR).join(LOCAL_VOLUME_PLUGIN);
    let uid = pod_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let global = plugin_devices_dir(root_dir, LOCAL_VOLUME_PLUGIN).join(&name);
        unmap(&global, &uid, &e.path(), m).map_err(|source| VolumeError::TearDown {
            op: "unmap block volume",
            path: global.join(&uid),
            source,
        })?;
        info!(pod = %uid, volume = %name, "unmapped local block volume");
    }
    Ok(())
}

/// The devices of one container's volumeDevices (upstream's makeBlockVolumes): the pod's
/// link to each, for the runtime to resolve, "mrw", or "r" when the pod's claim is readOnly.
pub fn container_devices(c: &Container, vols: &PodVolumes) -> Result<Vec<DeviceInfo>, VolumeError> {
    let mut out = Vec::new();
    for (i, d) in c.volume_devices.iter().flatten().enumerate() {
        let err = |field: &'static str, reason: String| VolumeError::Device {
            pod: vols.pod.clone(),
            container: c.name.clone(),
            index: i,
            volume: d.name.clone(),
            field,
            reason,
        };
        if !d.device_path.starts_with('/') {
            return Err(err(
                "devicePath",
                format!(
                    "error DevicePath `{}` must be an absolute path",
                    d.device_path
                ),
            ));
        }
        let Some(vol) = vols.get(&d.name).filter(|v| v.kind.is_block()) else {
            return Err(err(
                "name",
                format!(
                    "cannot find volume {:?} to pass into container {:?}",
                    d.name, c.name
                ),
            ));
        };
        // As upstream: a link that is not there (yet) gives no device.
        if fs::symlink_metadata(&vol.path).is_ok_and(|md| md.file_type().is_symlink()) {
            out.push(DeviceInfo {
                host_path: vol.path.clone(),
                container_path: d.device_path.clone(),
                permissions: if vol.read_only { "r" } else { "mrw" },
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mounter::FakeMounter;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    #[test]
    fn modes_that_disagree_with_the_use_name_pod_container_and_volume_in_upstreams_words() {
        let p = pod(json!([
            {"name": "app", "image": "i", "volumeMounts": [{"name": "files", "mountPath": "/f"}],
             "volumeDevices": [{"name": "raw", "devicePath": "/dev/xvda"}]}
        ]));
        let u = uses(&p);
        assert!(u.check("db_ns(u1)", "files", "Filesystem").is_ok());
        assert!(u.check("db_ns(u1)", "raw", "Block").is_ok());
        let e = u.check("db_ns(u1)", "files", "Block").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod db_ns(u1): container \"app\": volume \"files\": volume files has volumeMode Block, but is specified in volumeMounts"
        );
        assert_eq!(
            e.event_message(),
            "Unable to attach or mount volumes: unmounted volumes=[files], unattached volumes=[files], \
             failed to process volumes=[files]: volume files has volumeMode Block, but is specified in volumeMounts"
        );
        assert_eq!(e.waiting_reason(), "ContainerCreating");
        let e = u.check("db_ns(u1)", "raw", "Filesystem").unwrap_err();
        assert!(
            e.to_string().ends_with(
                "container \"app\": volume \"raw\": volume raw has volumeMode Filesystem, but is specified in volumeDevices"
            ),
            "{e}"
        );
    }

    #[test]
    fn map_binds_the_device_onto_the_pods_map_file_links_and_locks_it_and_unmap_undoes_all() {
        let tmp = tempfile::tempdir().unwrap();
        let device = tmp.path().join("dev-sdz");
        fs::write(&device, "").unwrap();
        let global = tmp.path().join("plugins/p/volumeDevices/pv-1");
        let link = tmp.path().join("pods/u1/volumeDevices/p/pv-1");
        let m = FakeMounter::default();
        map(&device, &global, "u1", &link, &m).unwrap();
        map(&device, &global, "u1", &link, &m).unwrap();
        assert_eq!(fs::read_link(&link).unwrap(), device);
        assert_eq!(
            *m.binds.lock().unwrap(),
            vec![(device.clone(), global.join("u1"))],
            "bound once, however often mapped"
        );
        assert!(
            m.locked.lock().unwrap().contains(&global.join("u1")),
            "the device held open over the map file"
        );
        // A lock a crash left out (bound, not locked) is taken by the next map.
        m.locked.lock().unwrap().clear();
        map(&device, &global, "u1", &link, &m).unwrap();
        assert!(m.locked.lock().unwrap().contains(&global.join("u1")));
        // A second pod of the same device keeps the global folder while it maps it.
        let link2 = tmp.path().join("pods/u2/volumeDevices/p/pv-1");
        map(&device, &global, "u2", &link2, &m).unwrap();
        unmap(&global, "u1", &link, &m).unwrap();
        assert!(!link.exists() && !global.join("u1").exists());
        assert!(global.join("u2").exists());
        unmap(&global, "u2", &link2, &m).unwrap();
        assert!(
            !global.exists(),
            "the global map path goes with the last pod"
        );
        assert!(m.mounted.lock().unwrap().is_empty());
        assert!(
            m.locked.lock().unwrap().is_empty(),
            "every lock released (before its unmount: the fake refuses an unmount under one)"
        );
        unmap(&global, "u2", &link2, &m).unwrap();
    }

    #[test]
    fn a_local_path_that_is_no_block_device_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let m = FakeMounter::default();
        let blame = Blame {
            pod: "db_ns(u1)",
            volume: "pv-1",
        };
        let dir = tmp.path().display().to_string();
        let e = set_up_local(
            "u1",
            "pv-1",
            &dir,
            false,
            &tmp.path().join("pod"),
            tmp.path(),
            &blame,
            &m,
        )
        .unwrap_err();
        assert_eq!(
            e.event_message(),
            format!("MapVolume.MapPodDevice failed for volume \"pv-1\" : local volume path {dir} is not a block device")
        );
        assert!(m.binds.lock().unwrap().is_empty());
    }

    #[test]
    fn each_device_gets_the_pods_link_with_upstreams_permissions() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("pv-1");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let mut vols = PodVolumes::new("db_ns(u1)", tmp.path());
        let block = |read_only| HostVolume {
            path: link.clone(),
            read_only,
            kind: VolumeKind::LocalBlock,
        };
        vols.insert("rw", block(false));
        vols.insert("ro", block(true));
        vols.insert(
            "files",
            HostVolume {
                path: tmp.path().into(),
                read_only: false,
                kind: VolumeKind::Local,
            },
        );
        let c: Container = serde_json::from_value(json!({"name": "app", "volumeDevices": [
            {"name": "rw", "devicePath": "/dev/xvda"}, {"name": "ro", "devicePath": "/dev/xvdb"}]}))
        .unwrap();
        let got = container_devices(&c, &vols).unwrap();
        assert_eq!(
            got,
            vec![
                DeviceInfo {
                    host_path: link.clone(),
                    container_path: "/dev/xvda".into(),
                    permissions: "mrw"
                },
                DeviceInfo {
                    host_path: link.clone(),
                    container_path: "/dev/xvdb".into(),
                    permissions: "r"
                },
            ]
        );
        let c: Container = serde_json::from_value(json!({"name": "app", "volumeDevices": [
            {"name": "files", "devicePath": "/dev/xvda"}]}))
        .unwrap();
        assert_eq!(
            container_devices(&c, &vols).unwrap_err().to_string(),
            "pod db_ns(u1): container \"app\": volumeDevices[0] (volume \"files\"): name: cannot find volume \"files\" to pass into container \"app\""
        );
        let c: Container = serde_json::from_value(json!({"name": "app", "volumeDevices": [
            {"name": "rw", "devicePath": "xvda"}]}))
        .unwrap();
        let e = container_devices(&c, &vols).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("devicePath: error DevicePath `xvda` must be an absolute path"),
            "{e}"
        );
        assert_eq!(e.waiting_reason(), "CreateContainerConfigError");
    }
}
