//! The agent's folders under the root dir and their modes. What a pod holds on the node (its
//! secrets, service-account tokens, configMaps, emptyDir data, /etc/hosts) lives under
//! `<root>/pods/<uid>`; the files themselves may be world-readable (containers run as any
//! user and read them through their bind mounts), so the folders above them are what keeps
//! other users of the node out. As upstream's setupDataDirs and makePodDataDirs, the root
//! dir, the pods dir, each pod's dir and its volumes dirs are 0750 (owner and group only).
//! Folders left by an older version with wider modes are tightened at start.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Upstream's mode for the kubelet's data folders.
pub(crate) const PRIVATE_DIR_MODE: u32 = 0o750;
/// The bits a private folder must not have: group write and everything for others.
const NOT_PRIVATE: u32 = 0o027;

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot create {dir}: {source}")]
    Create {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot restrict the mode of {dir} to owner and group: {source}")]
    Chmod {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("{dir} is not a directory")]
    NotADirectory { dir: String },
}

impl From<DataDirError> for io::Error {
    fn from(e: DataDirError) -> Self {
        io::Error::other(e)
    }
}

/// Creates the root dir (0750 when it is new; an existing one is left as the admin made it,
/// since `--root-dir` may name a folder shared with other software) and the pods dir (0750,
/// tightened when an older version left it wider), and tightens every pod dir already in it.
/// Called once at start, before any pod runs.
pub fn setup_data_dirs(root_dir: &Path) -> Result<(), DataDirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(root_dir)
        .map_err(|source| DataDirError::Create {
            dir: root_dir.display().to_string(),
            source,
        })?;
    let pods = root_dir.join("pods");
    ensure_private_dir(&pods)?;
    // Only the folders readdir returns are touched; a name in it is never taken from a pod.
    if let Ok(entries) = std::fs::read_dir(&pods) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let dir = e.path();
                tighten(&dir)?;
                let volumes = dir.join("volumes");
                if std::fs::symlink_metadata(&volumes).is_ok_and(|m| m.is_dir()) {
                    tighten(&volumes)?;
                }
            }
        }
    }
    Ok(())
}

/// Makes `dir` (and any missing parent) with mode 0750, refuses a file in its place, and takes group write and the others' bits off a folder that has them.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), DataDirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(|source| DataDirError::Create {
            dir: dir.display().to_string(),
            source,
        })?;
    tighten(dir)
}

/// The longest pod UID taken: a UUID has 36 characters, a static pod's hash 32.
const UID_MAX: usize = 128;

/// Why `uid` cannot name a pod's folder (`<root>/pods/<uid>`), or `None` when it can. A pod
/// UID becomes a path (its folder, its log folder) and a path is removed with the pod, so only
/// ASCII letters, digits, '-' and '.' are taken, starting with a letter or digit (never "..",
/// never a '/', never a NUL). API pods carry the apiserver's UUIDs; a static pod's manifest may
/// set any string, and is refused with this reason.
pub fn uid_problem(uid: &str) -> Option<String> {
    let first_ok = uid
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_alphanumeric);
    let chars_ok = uid
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if uid.len() > UID_MAX {
        return Some(format!("must be no more than {UID_MAX} characters"));
    }
    if !first_ok || !chars_ok {
        return Some(
            "must consist of ASCII letters, digits, '-' or '.' and start with a letter or digit \
             (it names the pod's folder on the node)"
                .into(),
        );
    }
    None
}

/// Whether `part` cannot be spliced into a file name: a pod's name and namespace go into
/// its log folder's and log links' names (`<ns>_<name>_<uid>`), which are removed with it.
pub fn breaks_a_file_name(part: &str) -> bool {
    part.contains('/') || part.contains('\0')
}

fn tighten(dir: &Path) -> Result<(), DataDirError> {
    let chmod_err = |source| DataDirError::Chmod {
        dir: dir.display().to_string(),
        source,
    };
    // Followed when a symlink: an admin may put the pods dir on another disk that way, and
    // only root writes these folders.
    let meta = std::fs::metadata(dir).map_err(chmod_err)?;
    if !meta.is_dir() {
        return Err(DataDirError::NotADirectory {
            dir: dir.display().to_string(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & NOT_PRIVATE != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !NOT_PRIVATE))
            .map_err(chmod_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn new_root_and_pods_dirs_are_closed_to_others() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("var/lib/kubelet-rs");
        setup_data_dirs(&root).unwrap();
        assert_eq!(mode(&root) & 0o027, 0, "root {:o}", mode(&root));
        assert_eq!(mode(&root.join("pods")) & 0o027, 0);
    }

    /// An older version made the pods dir and the pod dirs 0755: they are tightened at start.
    #[test]
    fn existing_wide_dirs_are_tightened_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let pod = root.join("pods/uid-1");
        std::fs::create_dir_all(pod.join("volumes/kubernetes.io~secret/s")).unwrap();
        for d in [root.join("pods"), pod.clone(), pod.join("volumes")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(root.join("pods"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        setup_data_dirs(root).unwrap();
        assert_eq!(mode(&root.join("pods")), 0o750);
        assert_eq!(mode(&pod), 0o750);
        assert_eq!(mode(&pod.join("volumes")), 0o750);
        // A narrower mode the admin chose is kept.
        std::fs::set_permissions(&pod, std::fs::Permissions::from_mode(0o700)).unwrap();
        setup_data_dirs(root).unwrap();
        assert_eq!(mode(&pod), 0o700);
    }

    #[test]
    fn only_plain_uids_name_a_folder() {
        for good in [
            "9d1f4c0e-2b1a-4c1e-8f00-0123456789ab",
            "0123abcdef",
            "static-web.1",
        ] {
            assert_eq!(uid_problem(good), None, "{good}");
        }
        for bad in [
            "", "..", ".", "../x", "a/b", "/abs", "a\0b", "a b", "-x", ".hidden", "a_b",
        ] {
            assert!(uid_problem(bad).is_some(), "{bad:?}");
        }
        assert!(uid_problem(&"a".repeat(UID_MAX + 1)).is_some());
    }
}
