//! The volume types, each behind one trait (upstream's volume plugins): a type says which
//! `Volume` field it serves, sets a volume up, and finds one an earlier pass (or run) left
//! when a refresh fails. What a set-up volume is measured and counted as is its
//! [`VolumeKind`]'s (`kind`). Adding a type is its own file implementing [`VolumeSource`]
//! and one line in [`SOURCES`].

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};

use super::fetch::Fetched;
use super::mounter::Mounter;
use super::{
    downward, empty_dir, mount_memory, ownership, Blame, DownwardContext, HostVolume, VolumeError,
};

/// One volume type.
pub(super) trait VolumeSource: Sync {
    /// The `Volume` field this type serves, by its API name (`emptyDir`).
    fn field(&self) -> &'static str;

    /// Sets the volume up (idempotent: every pass calls it again) and says where it is.
    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError>;

    /// After its set-up failed: the volume as an earlier pass (or the agent before a
    /// restart) left it, when it may go on with that content; `None` when it may not.
    fn set_up_before(&self, _vol: &Volume, _pod_dir: &Path) -> Option<HostVolume> {
        None
    }

    /// Upstream's plugin name for a set-up that failed before saying its kind; `None` for
    /// types that name theirs only once set up (claims, followed to their volume).
    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        None
    }
}

/// Every volume type. The order names the plugin of a volume that sets several fields (and
/// so fails): CSI's first, as its driver names it.
pub(super) static SOURCES: &[&dyn VolumeSource] = &[
    &super::csi::Inline,
    &super::empty_dir::EmptyDir,
    &super::host_path::HostPath,
    &super::object_files::ConfigMapSource,
    &super::object_files::SecretSource,
    &super::downward::DownwardApi,
    &super::projected::Projected,
    &super::persistent::Claim("persistentVolumeClaim"),
    &super::persistent::Claim("ephemeral"),
];

/// The type serving `field` (a `Volume` field's API name).
pub(super) fn source_of(field: &str) -> Option<&'static dyn VolumeSource> {
    SOURCES.iter().copied().find(|s| s.field() == field)
}

/// What one volume's set-up reads: the pod, its folder, what the node knows, the objects
/// read for it, the mounter, and whom its errors name.
pub(super) struct SetUp<'a> {
    pub(super) pod: &'a Pod,
    pub(super) blame: &'a Blame<'a>,
    pub(super) pod_dir: &'a Path,
    pub(super) ctx: &'a DownwardContext,
    pub(super) fetched: &'a Fetched,
    pub(super) m: &'a dyn Mounter,
}

impl SetUp<'_> {
    /// `<pod>/volumes/<plugin>`, closed to other users as upstream makes them (0750): the
    /// volume folders below are 0777 or hold world-readable secret files.
    pub(super) fn plugin_dir(&self, plugin: &str) -> Result<PathBuf, VolumeError> {
        let volumes_dir = self.pod_dir.join("volumes");
        let dir = volumes_dir.join(plugin);
        crate::data_dirs::ensure_private_dir(&volumes_dir)
            .and_then(|()| crate::data_dirs::ensure_private_dir(&dir))
            .map_err(|e| self.blame.failed(e.to_string()))?;
        Ok(dir)
    }

    /// The folder of this volume under its plugin's.
    pub(super) fn volume_dir(&self, plugin: &str) -> Result<PathBuf, VolumeError> {
        Ok(self.plugin_dir(plugin)?.join(self.blame.volume))
    }

    /// Who owns the files written into the volume (the pod's fsGroup).
    pub(super) fn ownership(&self) -> Result<ownership::Ownership, VolumeError> {
        ownership::fs_group(self.pod)
            .map(|fs_group| ownership::Ownership { fs_group })
            .map_err(|r| self.blame.invalid("securityContext.fsGroup", r.to_string()))
    }

    /// A source's defaultMode, checked; the API's default where unset.
    pub(super) fn default_mode(&self, field: &str, mode: Option<i32>) -> Result<u32, VolumeError> {
        downward::check_mode(mode.unwrap_or(downward::DEFAULT_MODE)).map_err(|r| {
            self.blame
                .invalid(&format!("{field}.defaultMode"), r.to_string())
        })
    }

    /// A tmpfs at `dir` for content that never touches the disk, sized as the pod's memory.
    pub(super) fn memory(&self, dir: &Path) -> Result<(), VolumeError> {
        let size = empty_dir::memory_size(self.pod, None, self.ctx.allocatable.memory_bytes);
        mount_memory(dir, size, self.m, self.blame.pod, self.blame.volume)
            .map(drop)
            .map_err(|r| self.blame.failed(r.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::{plugin_of_spec, set_up_before, VolumeKind};

    #[test]
    fn each_field_has_one_type() {
        let mut fields: Vec<&str> = SOURCES.iter().map(|s| s.field()).collect();
        let all = fields.len();
        fields.sort();
        fields.dedup();
        assert_eq!(fields.len(), all, "a field served twice: {fields:?}");
        assert!(source_of("emptyDir").is_some());
        assert!(source_of("nfs").is_none());
    }

    fn volume(v: serde_json::Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    /// Only the atomic writer's volumes go on with their last content, and only once the
    /// writer has made their `..data` link.
    #[test]
    fn only_written_volumes_are_found_again() {
        let tmp = tempfile::tempdir().unwrap();
        let cm = volume(serde_json::json!({"name": "cfg", "configMap": {"name": "x"}}));
        let ed = volume(serde_json::json!({"name": "scratch", "emptyDir": {}}));
        assert_eq!(set_up_before(&cm, tmp.path()), None);
        let dir = tmp.path().join("volumes/kubernetes.io~configmap/cfg");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("..2026", dir.join("..data")).unwrap();
        assert_eq!(
            set_up_before(&cm, tmp.path()),
            Some(HostVolume {
                path: dir,
                read_only: true,
                kind: VolumeKind::ConfigMap,
            })
        );
        std::fs::create_dir_all(
            tmp.path()
                .join("volumes/kubernetes.io~empty-dir/scratch/..data"),
        )
        .unwrap();
        assert_eq!(set_up_before(&ed, tmp.path()), None);
    }

    #[test]
    fn a_volume_that_sets_several_fields_is_named_by_its_driver_first() {
        let both = volume(serde_json::json!({
            "name": "v", "emptyDir": {}, "csi": {"driver": "d.example.com"}
        }));
        assert_eq!(plugin_of_spec(&both), "kubernetes.io/csi:d.example.com");
        let claim = volume(serde_json::json!({
            "name": "v", "persistentVolumeClaim": {"claimName": "c"}
        }));
        assert_eq!(plugin_of_spec(&claim), "<n/a>");
        let none = volume(serde_json::json!({"name": "v"}));
        assert_eq!(plugin_of_spec(&none), "<n/a>");
    }
}
