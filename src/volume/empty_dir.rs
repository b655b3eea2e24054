//! emptyDir volumes: a 0777 directory under the pod dir, or with medium Memory a tmpfs
//! mounted there. downwardAPI and projected volumes live on a memory emptyDir too, as
//! upstream wraps them (their content never touches the disk).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use tracing::warn;

use super::mounter::Mounter;
use super::source::{SetUp, VolumeSource};
use super::{
    fs_group, mount_memory, ownership, Blame, HostVolume, VolumeError, VolumeKind, EMPTY_DIR_PLUGIN,
};
use crate::vocabulary::quantity::{self, Quantity};

/// The directory, world-writable as upstream makes it (containers run as any user).
pub fn setup_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} exists and is not a directory",
            dir.display()
        )));
    }
    // The umask trims the mode at creation; set it explicitly, as upstream does. Only the
    // permission bits count (as upstream's), so the setgid an fsGroup adds to a configMap
    // volume's root is not taken off and put back on every pass.
    if meta.permissions().mode() & 0o777 != 0o777 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

/// A tmpfs at `dir` of at most `size` bytes. A tmpfs already there is kept as it is (its
/// content is the pod's data), which makes this safe to repeat after an agent restart.
pub fn setup_tmpfs(dir: &Path, size: Option<i64>, m: &dyn Mounter) -> io::Result<bool> {
    setup_dir(dir)?;
    if m.mounted_fs(dir)?.as_deref() == Some("tmpfs") {
        return Ok(false);
    }
    let options: Vec<String> = size
        .filter(|s| *s > 0)
        .map(|s| format!("size={s}"))
        .into_iter()
        .collect();
    m.mount_tmpfs(dir, &options)?;
    Ok(true)
}

/// The size of a memory-backed volume, as upstream sizes it: the node's allocatable
/// memory, lowered to the pod's memory limit when it has one, lowered to the volume's
/// sizeLimit when set. None (the kernel's default of half the RAM) only when none is known.
pub fn memory_size(pod: &Pod, size_limit: Option<&str>, allocatable: Option<i64>) -> Option<i64> {
    let mut size = allocatable.filter(|a| *a > 0);
    let mut lower = |v: Option<i64>| {
        if let Some(v) = v.filter(|v| *v > 0) {
            if size.is_none_or(|s| v <= s) {
                size = Some(v);
            }
        }
    };
    lower(pod_memory_limit(pod));
    lower(size_limit.and_then(quantity::bytes));
    size
}

/// Bytes of an API quantity, rounded up as upstream's `Value()`; one that does not parse
/// is left out here (the container's spec refuses it, naming the field).
fn api_bytes(q: &ApiQuantity) -> Option<i64> {
    Quantity::from_api(q).ok().map(|q| q.value())
}

fn memory_limit(c: &Container) -> Option<i64> {
    c.resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")
        .and_then(api_bytes)
        .filter(|b| *b > 0)
}

/// The pod's memory limit as its cgroup gets it: the pod-level limit when set, else only
/// when every container has one: the larger of the app containers plus sidecars and the
/// biggest init container plus the sidecars started before it, plus the pod overhead. The sums
/// saturate: limits come from the pod's author, and two near the top of i64 must not overflow.
pub fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get("memory"))
        .and_then(api_bytes)
        .unwrap_or(0);
    if let Some(l) = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(api_bytes)
    {
        return Some(l.saturating_add(overhead));
    }
    let mut apps = 0i64;
    for c in &spec.containers {
        apps = apps.saturating_add(memory_limit(c)?);
    }
    let mut sidecars = 0i64;
    let mut init_peak = 0i64;
    for c in spec.init_containers.iter().flatten() {
        let l = memory_limit(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(l);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.saturating_add(l));
        }
    }
    Some(
        apps.saturating_add(sidecars)
            .max(init_peak)
            .saturating_add(overhead),
    )
}

/// emptyDir: a folder on the node's disk, or a tmpfs with medium Memory.
pub(super) struct EmptyDir;

impl VolumeSource for EmptyDir {
    fn field(&self) -> &'static str {
        "emptyDir"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let blame = cx.blame;
        let ed = vol.empty_dir.clone().unwrap_or_default();
        let dir = cx.volume_dir(EMPTY_DIR_PLUGIN)?;
        let group = ownership::fs_group(cx.pod)
            .map_err(|r| blame.invalid("securityContext.fsGroup", r.to_string()))?;
        match ed.medium.as_deref().unwrap_or("") {
            "" => {
                let new = fs::symlink_metadata(&dir).is_err();
                setup_dir(&dir)
                    .map_err(|e| blame.failed(format!("cannot create {}: {e}", dir.display())))?;
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
                let size = memory_size(
                    cx.pod,
                    ed.size_limit.as_ref().map(|q| q.0.as_str()),
                    cx.ctx.allocatable.memory_bytes,
                );
                let new = mount_memory(&dir, size, cx.m, blame.pod, blame.volume)
                    .map_err(|r| blame.failed(r.to_string()))?;
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

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::EmptyDir.plugin_name().to_string())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mounter::FakeMounter;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": v})).unwrap()
    }

    #[test]
    fn dir_is_world_writable_and_setup_repeats() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("a/b");
        setup_dir(&d).unwrap();
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o7777,
            0o777
        );
        fs::write(d.join("data"), "x").unwrap();
        setup_dir(&d).unwrap();
        assert_eq!(fs::read_to_string(d.join("data")).unwrap(), "x");
    }

    #[test]
    fn tmpfs_mounted_once_with_size() {
        let tmp = tempfile::tempdir().unwrap();
        let m = FakeMounter::default();
        let d = tmp.path().join("v");
        assert!(setup_tmpfs(&d, Some(1 << 20), &m).unwrap());
        assert!(!setup_tmpfs(&d, Some(1 << 20), &m).unwrap());
        let calls = m.calls.lock().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, vec!["size=1048576".to_string()]);
    }

    #[test]
    fn memory_size_is_the_smallest_known_bound() {
        let no_limits = pod(json!({"containers": [{"name": "a"}]}));
        assert_eq!(memory_size(&no_limits, None, None), None);
        assert_eq!(memory_size(&no_limits, None, Some(8 << 30)), Some(8 << 30));
        assert_eq!(
            memory_size(&no_limits, Some("64Mi"), Some(8 << 30)),
            Some(64 << 20)
        );
        // A sizeLimit above what the pod may use does not raise the bound.
        assert_eq!(
            memory_size(&no_limits, Some("64Gi"), Some(8 << 30)),
            Some(8 << 30)
        );

        let limited = pod(json!({"containers": [
            {"name": "a", "resources": {"limits": {"memory": "100Mi"}}},
            {"name": "b", "resources": {"limits": {"memory": "28Mi"}}}]}));
        assert_eq!(memory_size(&limited, None, Some(8 << 30)), Some(128 << 20));
        assert_eq!(
            memory_size(&limited, Some("1Mi"), Some(8 << 30)),
            Some(1 << 20)
        );
        // Exact past 2^53, where floating point loses the last byte.
        assert_eq!(
            memory_size(&no_limits, Some("9007199254740993"), Some(1 << 62)),
            Some(9_007_199_254_740_993)
        );
        assert_eq!(
            memory_size(&no_limits, Some("0.5Gi"), Some(8 << 30)),
            Some(512 << 20)
        );
    }

    /// Limits near the top of i64 (5Ei each: their sum is past it) give the largest limit, not
    /// an overflow (a panic in a debug build, a negative size in a release one).
    #[test]
    fn huge_limits_saturate() {
        let huge = pod(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"memory": "5Ei"}}},
                {"name": "init", "resources": {"limits": {"memory": "5Ei"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"memory": "5Ei"}}},
                {"name": "b", "resources": {"limits": {"memory": "5Ei"}}}],
            "overhead": {"memory": "5Ei"}}));
        assert_eq!(pod_memory_limit(&huge), Some(i64::MAX));
        assert_eq!(memory_size(&huge, None, Some(8 << 30)), Some(8 << 30));
        let pod_level = pod(json!({
            "resources": {"limits": {"memory": "5Ei"}},
            "containers": [{"name": "a"}],
            "overhead": {"memory": "5Ei"}}));
        assert_eq!(pod_memory_limit(&pod_level), Some(i64::MAX));
    }

    #[test]
    fn pod_limit_follows_init_and_sidecar_rules() {
        let p = pod(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"memory": "10Mi"}}},
                {"name": "big", "resources": {"limits": {"memory": "500Mi"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"memory": "100Mi"}}}]}));
        assert_eq!(pod_memory_limit(&p), Some(510 << 20));
        let partial = pod(json!({"containers": [
            {"name": "a", "resources": {"limits": {"memory": "100Mi"}}}, {"name": "b"}]}));
        assert_eq!(pod_memory_limit(&partial), None);
        let pod_level = pod(json!({"resources": {"limits": {"memory": "1Gi"}},
            "containers": [{"name": "b"}]}));
        assert_eq!(pod_memory_limit(&pod_level), Some(1 << 30));
    }
}
