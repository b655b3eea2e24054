//! Who owns the files of the volumes the agent writes (configMap, secret, downwardAPI,
//! projected), as upstream leaves them:
//! - with the pod's `securityContext.fsGroup`, every file, directory and link of the volume
//!   is group-owned by it; files gain group read (these volumes are read-only, so upstream's
//!   SetVolumeOwnership adds `0440`, never write), directories gain group read and search and
//!   the setgid bit (`0550` and `02000`);
//! - a projected service-account token is written `0600` when the pod has an fsGroup or one
//!   runAsUser for all its containers (the "fsUser"), and is then owned by that user, so only
//!   the pod's own user (and group) can read it.
//!
//! The writer applies these as it writes, so a second pass over unchanged content finds the
//! final modes and owners already in place and rewrites nothing.

use k8s_openapi::api::core::v1::Pod;

/// Group bits upstream adds to a read-only volume's files.
const GROUP_READ: u32 = 0o440;
/// Group bits upstream adds to a read-only volume's directories, with setgid.
const GROUP_DIR: u32 = 0o2550;
/// Directories the writer makes (inside a version directory).
const DIR_MODE: u32 = 0o755;
/// A token file when someone other than "everyone" is meant to read it.
pub const PRIVATE_TOKEN_MODE: u32 = 0o600;

/// The pod-wide owner settings of one volume.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ownership {
    /// The pod's fsGroup.
    pub fs_group: Option<u32>,
}

impl Ownership {
    /// A file's mode on disk for the mode its item asks for.
    pub fn file_mode(&self, mode: u32) -> u32 {
        if self.fs_group.is_some() {
            mode | GROUP_READ
        } else {
            mode
        }
    }

    /// The mode of directories the writer makes.
    pub fn dir_mode(&self) -> u32 {
        self.root_mode(DIR_MODE)
    }

    /// The volume root's mode, from the one it has (its medium decides the base).
    pub fn root_mode(&self, current: u32) -> u32 {
        if self.fs_group.is_some() {
            current | GROUP_DIR
        } else {
            current
        }
    }
}

/// The pod's fsGroup, when it has one the kernel can take (a gid is 32 bits; the API
/// already refuses negative ones).
pub fn fs_group(pod: &Pod) -> Result<Option<u32>, InvalidGroup> {
    let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
    else {
        return Ok(None);
    };
    u32::try_from(g)
        .map(Some)
        .map_err(|source| InvalidGroup { group: g, source })
}

/// An fsGroup the kernel cannot take.
#[derive(Debug, thiserror::Error)]
#[error("{group} is not a valid group id")]
pub struct InvalidGroup {
    group: i64,
    #[source]
    source: std::num::TryFromIntError,
}

/// Upstream's FsUserFrom: the runAsUser every init and app container runs with (its own, or
/// the pod's), when they all have the same one; None when one has none or they differ.
pub fn fs_user(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut user = None;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let own = c
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or(pod_user)?;
        match user {
            Some(u) if u != own => return None,
            _ => user = Some(own),
        }
    }
    user.and_then(|u| u32::try_from(u).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn fs_group_adds_group_read_and_setgid_directories() {
        let none = Ownership::default();
        assert_eq!(none.file_mode(0o400), 0o400);
        assert_eq!(none.dir_mode(), 0o755);
        let g = Ownership { fs_group: Some(7) };
        assert_eq!(g.file_mode(0o400), 0o440);
        assert_eq!(g.file_mode(0o600), 0o640);
        assert_eq!(g.file_mode(0o644), 0o644);
        assert_eq!(g.dir_mode(), 0o2755);
        assert_eq!(g.root_mode(0o777), 0o2777);
    }

    #[test]
    fn fs_user_needs_one_user_for_every_container() {
        let same = pod(json!({
            "securityContext": {"runAsUser": 1000},
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1000}}]}));
        assert_eq!(fs_user(&same), Some(1000));
        let differ = pod(json!({
            "securityContext": {"runAsUser": 1000},
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1001}}]}));
        assert_eq!(fs_user(&differ), None);
        let unset = pod(json!({"containers": [
            {"name": "a", "securityContext": {"runAsUser": 5}}, {"name": "b"}]}));
        assert_eq!(fs_user(&unset), None);
        assert_eq!(fs_group(&pod(json!({"containers": []}))).unwrap(), None);
        let g = pod(json!({"securityContext": {"fsGroup": 2000}, "containers": []}));
        assert_eq!(fs_group(&g).unwrap(), Some(2000));
    }
}
