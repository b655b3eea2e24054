//! Upstream's SetVolumeOwnership for the writable volumes the agent does not write itself
//! (emptyDir, local PVs, CSI volumes whose driver leaves fsGroup to the node): every entry is
//! group-owned by the pod's fsGroup, files gain group read and write, folders also group
//! search and the setgid bit (new files inherit the group), and the volume root is changed
//! last, so an interrupted walk is taken up again under `OnRootMismatch`.
//!
//! The volume's content belongs to its containers, and they may change it while the walk runs
//! (a requiresRepublish CSI volume is walked again on every pass, with its containers
//! running). A walk by path names would follow a folder swapped for a symlink out to the
//! host's files and re-own or re-mode them. So the walk goes by descriptor only: the root is
//! opened O_NOFOLLOW, every entry is opened O_PATH|O_NOFOLLOW relative to its folder's
//! descriptor (a symlink gives a descriptor of the link itself), its type is read from that
//! descriptor with fstat, and every change is made on that descriptor: fchownat(AT_EMPTY_PATH)
//! for the group, fchmod for a folder (reopened as `.` from its own descriptor), and for other
//! files chmod through `/proc/self/fd/<n>`, which names the very inode fstat saw (fchmod
//! refuses O_PATH descriptors, and opening a FIFO or device to get a readable descriptor
//! could block or wake a driver). Whatever a container swaps in after an open changes
//! nothing: the descriptor still names what was checked. A symlink is re-grouped (lchown is
//! harmless) but never re-moded, as chmod would follow it. Nothing on another mount (another
//! st_dev) is changed or entered: its root belongs to whoever mounted it.
//!
//! Only the folder being read is held open: going back up reopens `..` from it and checks
//! that it is still the folder entered (device and inode), so a walk holds two descriptors
//! at most whatever the depth, and a folder moved away mid-walk fails the walk instead of
//! leading it elsewhere.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};
use nix::unistd::Gid;

/// Group bits upstream adds to a writable volume's files (its rwMask).
const GROUP_RW: u32 = 0o660;
/// Group bits upstream adds to a writable volume's folders: rwMask, execMask and setgid.
const GROUP_DIR: u32 = 0o2770;
/// The bits a chown by root clears on a file that is not a folder (setuid, setgid), which
/// upstream puts back by chmod-ing the mode it read before.
const SET_ID: u32 = 0o6000;

/// `securityContext.fsGroupChangePolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ChangePolicy {
    /// Walk the whole volume every time (upstream's default).
    #[default]
    Always,
    /// Walk only when the root does not carry the group and its bits yet.
    OnRootMismatch,
}

/// A policy the API does not know (the apiserver refuses it; static pods are not checked).
#[derive(Debug, thiserror::Error)]
#[error("Unsupported value: {0:?}: supported values: \"OnRootMismatch\", \"Always\"")]
pub(crate) struct UnknownPolicy(String);

/// The pod's fsGroupChangePolicy (Always when unset).
pub(crate) fn change_policy(pod: &Pod) -> Result<ChangePolicy, UnknownPolicy> {
    match pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group_change_policy.as_deref())
    {
        None | Some("Always") => Ok(ChangePolicy::Always),
        Some("OnRootMismatch") => Ok(ChangePolicy::OnRootMismatch),
        Some(other) => Err(UnknownPolicy(other.to_string())),
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FsGroupError {
    /// The root is missing, a symlink or not a folder: nothing was changed.
    #[error("cannot open the volume root {} as a folder (symlinks are not followed): {source}", path.display())]
    Root {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// One step on one entry failed; the walk stops there.
    #[error("{op} {}: {source}", path.display())]
    Entry {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A folder's `..` is no longer the folder the walk came from: it was moved while the
    /// walk was below it.
    #[error("{} was moved while its group was being changed", path.display())]
    Moved { path: PathBuf },
}

/// Whether the walk ran (false: skipped under OnRootMismatch).
pub(crate) type Walked = bool;

/// Applies `group` to the volume at `root` under `policy`. Blocking.
pub(crate) fn apply(root: &Path, group: u32, policy: ChangePolicy) -> Result<Walked, FsGroupError> {
    let root_err = |source: io::Error| FsGroupError::Root {
        path: root.to_path_buf(),
        source,
    };
    let fd = nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| root_err(e.into()))?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| root_err(e.into()))?;
    if policy == ChangePolicy::OnRootMismatch && root_matches(&st, group) {
        return Ok(false);
    }
    walk(fd, st, root.to_path_buf(), group)?;
    Ok(true)
}

/// Upstream's requiresPermissionChange turned round: the root already has the group, group
/// read, write and search, and setgid.
fn root_matches(st: &FileStat, group: u32) -> bool {
    st.st_gid == group && st.st_mode & GROUP_DIR == GROUP_DIR
}

/// A folder being walked: what is left of its entries, and what fstat said when it was
/// entered (to change it on leaving, and to check `..` against).
struct Frame {
    stat: FileStat,
    path: PathBuf,
    names: std::vec::IntoIter<CString>,
}

fn walk(
    root: OwnedFd,
    root_stat: FileStat,
    root_path: PathBuf,
    group: u32,
) -> Result<(), FsGroupError> {
    let dev = root_stat.st_dev;
    let names = list(&root, &root_path)?;
    let mut stack = vec![Frame {
        stat: root_stat,
        path: root_path,
        names: names.into_iter(),
    }];
    // The descriptor of the folder on top of the stack, the only folder held open.
    let mut cur = root;
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.next() else {
            let done = stack.pop().expect("the stack has a top");
            change(&cur, &done.stat, true, group, &done.path)?;
            if let Some(parent) = stack.last() {
                cur = reopen_parent(&cur, parent)?;
            }
            continue;
        };
        let path = top.path.join(OsStr::from_bytes(name.to_bytes()));
        let entry_err = |op, e: Errno| FsGroupError::Entry {
            op,
            path: path.clone(),
            source: e.into(),
        };
        let fd = match nix::fcntl::openat(
            &cur,
            name.as_c_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Removed since the folder was read: nothing left to change.
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(entry_err("open", e)),
        };
        let st = nix::sys::stat::fstat(&fd).map_err(|e| entry_err("stat", e))?;
        if st.st_dev != dev {
            continue;
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            // `.` from the O_PATH descriptor: the folder fstat saw, now readable.
            let dir = nix::fcntl::openat(
                &fd,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| entry_err("open", e))?;
            drop(fd);
            let names = list(&dir, &path)?;
            cur = dir;
            stack.push(Frame {
                stat: st,
                path,
                names: names.into_iter(),
            });
        } else {
            change(&fd, &st, false, group, &path)?;
        }
    }
    Ok(())
}

/// The names in a folder, but `.` and `..`, read through a descriptor of its own (the
/// folder's stays free for the openat calls).
fn list(dir: &OwnedFd, path: &Path) -> Result<Vec<CString>, FsGroupError> {
    let err = |e: Errno| FsGroupError::Entry {
        op: "read",
        path: path.to_path_buf(),
        source: e.into(),
    };
    let mut d = nix::dir::Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    let mut names = Vec::new();
    for entry in d.iter() {
        let entry = match entry {
            Ok(entry) => entry,
            // The folder was removed since it was opened: nothing is left in it to change.
            Err(Errno::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(err(e)),
        };
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// The folder above `cur`, which must still be `parent`.
fn reopen_parent(cur: &OwnedFd, parent: &Frame) -> Result<OwnedFd, FsGroupError> {
    let err = |e: Errno| FsGroupError::Entry {
        op: "reopen",
        path: parent.path.clone(),
        source: e.into(),
    };
    let up = nix::fcntl::openat(
        cur,
        "..",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    let st = nix::sys::stat::fstat(&up).map_err(err)?;
    if (st.st_dev, st.st_ino) != (parent.stat.st_dev, parent.stat.st_ino) {
        return Err(FsGroupError::Moved {
            path: parent.path.clone(),
        });
    }
    Ok(up)
}

/// The group and mode of one entry, through its descriptor: a readable one for a folder, an
/// O_PATH one otherwise. A change the file system refuses (root squashed, an immutable
/// file) is logged and the walk goes on, as upstream's changeFilePermission does: one such
/// file must not keep the pod from starting.
fn change(
    fd: &OwnedFd,
    st: &FileStat,
    is_dir: bool,
    group: u32,
    path: &Path,
) -> Result<(), FsGroupError> {
    let err = |op: &'static str, source: io::Error| {
        tracing::warn!(path = %path.display(), op, error = %source, "fsGroup: change refused; going on");
    };
    let chowned = st.st_gid != group;
    if chowned {
        // AT_EMPTY_PATH: the descriptor's own inode, a symlink itself when it is one.
        nix::unistd::fchownat(
            fd,
            "",
            None,
            Some(Gid::from_raw(group)),
            AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap_or_else(|e| err("chown", e.into()));
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        // A link's mode means nothing, and chmod would follow it.
        return Ok(());
    }
    let mode = st.st_mode & 0o7777;
    let want = mode | if is_dir { GROUP_DIR } else { GROUP_RW };
    let cleared = chowned && !is_dir && mode & SET_ID != 0;
    if want == mode && !cleared {
        return Ok(());
    }
    if is_dir {
        nix::sys::stat::fchmod(fd, Mode::from_bits_retain(want))
            .unwrap_or_else(|e| err("chmod", e.into()));
    } else {
        let by_fd = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        std::fs::set_permissions(by_fd, std::fs::Permissions::from_mode(want))
            .unwrap_or_else(|e| err("chmod", e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt};

    /// Without root only the process's own group can be given: then only the modes show
    /// what the walk did.
    fn test_group() -> u32 {
        crate::test_support::test_gid()
    }

    fn mode_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn gid_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().gid()
    }

    fn set_mode(p: &Path, mode: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn file(p: &Path, mode: u32) {
        fs::write(p, "x").unwrap();
        set_mode(p, mode);
    }

    fn dir(p: &Path, mode: u32) {
        fs::create_dir(p).unwrap();
        set_mode(p, mode);
    }

    /// A folder outside the volume standing for a host folder: 0700 with a 0600 file and a
    /// 0700 folder below, and their group.
    fn host_folder(base: &Path) -> (PathBuf, u32) {
        let host = base.join("host");
        dir(&host, 0o700);
        file(&host.join("shadow"), 0o600);
        dir(&host.join("sub"), 0o700);
        file(&host.join("sub/key"), 0o600);
        (host.clone(), gid_of(&host))
    }

    fn assert_host_untouched(host: &Path, gid: u32) {
        for (p, mode) in [
            (host.to_path_buf(), 0o700),
            (host.join("shadow"), 0o600),
            (host.join("sub"), 0o700),
            (host.join("sub/key"), 0o600),
        ] {
            assert_eq!(mode_of(&p), mode, "{}", p.display());
            assert_eq!(gid_of(&p), gid, "{}", p.display());
        }
    }

    #[test]
    fn a_tree_gets_the_group_with_group_rw_files_and_setgid_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let g = test_group();
        let root = tmp.path().join("vol");
        dir(&root, 0o755);
        file(&root.join("f"), 0o600);
        dir(&root.join("d"), 0o700);
        file(&root.join("d/g"), 0o644);
        dir(&root.join("d/e"), 0o750);
        file(&root.join("d/e/h"), 0o400);
        // A setuid file keeps its bit (a chown by root clears it; upstream puts it back).
        file(&root.join("d/suid"), 0o4755);

        assert!(apply(&root, g, ChangePolicy::Always).unwrap());

        for (p, mode) in [
            ("", 0o2775),
            ("f", 0o660),
            ("d", 0o2770),
            ("d/g", 0o664),
            ("d/e", 0o2770),
            ("d/e/h", 0o660),
            ("d/suid", 0o4775),
        ] {
            let p = root.join(p);
            assert_eq!(mode_of(&p), mode, "{}", p.display());
            assert_eq!(gid_of(&p), g, "{}", p.display());
        }
        // Again: nothing left to change, and nothing changes.
        assert!(apply(&root, g, ChangePolicy::Always).unwrap());
        assert_eq!(mode_of(&root.join("d/e/h")), 0o660);
    }

    #[test]
    fn a_symlink_to_a_host_folder_is_regrouped_itself_and_its_target_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let g = test_group();
        let (host, host_gid) = host_folder(tmp.path());
        let root = tmp.path().join("vol");
        dir(&root, 0o755);
        // What a container leaves in place of a folder it listed, and of a file.
        symlink(&host, root.join("data")).unwrap();
        symlink(host.join("shadow"), root.join("file")).unwrap();

        assert!(apply(&root, g, ChangePolicy::Always).unwrap());

        assert_host_untouched(&host, host_gid);
        assert_eq!(gid_of(&root.join("data")), g, "the link itself is lchowned");
        assert_eq!(gid_of(&root.join("file")), g);
        assert!(fs::symlink_metadata(root.join("data"))
            .unwrap()
            .is_symlink());
        assert_eq!(mode_of(&root), 0o2775);
    }

    #[test]
    fn a_linked_folder_is_never_entered_and_a_linked_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let g = test_group();
        let (host, host_gid) = host_folder(tmp.path());
        let root = tmp.path().join("vol");
        dir(&root, 0o755);
        dir(&root.join("in"), 0o700);
        file(&root.join("in/f"), 0o600);
        // A link to a folder inside the volume, and one looping onto its own folder: a walk
        // that followed them would change `in` through the link or never end.
        symlink(root.join("in"), root.join("to-in")).unwrap();
        symlink(".", root.join("in/loop")).unwrap();
        // A link deeper down to the host folder.
        symlink(&host, root.join("in/host")).unwrap();

        assert!(apply(&root, g, ChangePolicy::Always).unwrap());
        assert_host_untouched(&host, host_gid);
        assert_eq!(mode_of(&root.join("in/f")), 0o660);

        // The volume root itself a link to the host folder: refused, nothing changed.
        let linked = tmp.path().join("linked-root");
        symlink(&host, &linked).unwrap();
        let e = apply(&linked, g, ChangePolicy::Always).unwrap_err();
        assert!(matches!(e, FsGroupError::Root { .. }), "{e}");
        assert!(e.to_string().contains("linked-root"), "{e}");
        assert_host_untouched(&host, host_gid);
        // Nor is a root that is a file, or missing.
        let e = apply(&host.join("shadow"), g, ChangePolicy::Always).unwrap_err();
        assert!(matches!(e, FsGroupError::Root { .. }), "{e}");
        assert!(apply(&tmp.path().join("none"), g, ChangePolicy::Always).is_err());
        assert_host_untouched(&host, host_gid);
    }

    #[test]
    fn on_root_mismatch_walks_only_when_the_root_lacks_the_group_or_bits() {
        let tmp = tempfile::tempdir().unwrap();
        let g = test_group();
        let root = tmp.path().join("vol");
        dir(&root, 0o755);
        let below = root.join("below");
        file(&below, 0o600);
        let below_gid = gid_of(&below);
        // The root already matching: group-owned, 0770 and setgid.
        nix::unistd::chown(&root, None, Some(Gid::from_raw(g))).unwrap();
        set_mode(&root, 0o2770);

        assert!(!apply(&root, g, ChangePolicy::OnRootMismatch).unwrap());
        assert_eq!(mode_of(&below), 0o600, "skipped: nothing below changed");
        assert_eq!(gid_of(&below), below_gid);

        // Always walks whatever the root says.
        assert!(apply(&root, g, ChangePolicy::Always).unwrap());
        assert_eq!(mode_of(&below), 0o660);
        assert_eq!(gid_of(&below), g);

        // A root without setgid (or group write) no longer matches.
        set_mode(&below, 0o600);
        set_mode(&root, 0o0770);
        assert!(apply(&root, g, ChangePolicy::OnRootMismatch).unwrap());
        assert_eq!(mode_of(&below), 0o660);
        assert_eq!(mode_of(&root), 0o2770);
        set_mode(&below, 0o600);
        set_mode(&root, 0o2750);
        assert!(apply(&root, g, ChangePolicy::OnRootMismatch).unwrap());
        assert_eq!(mode_of(&below), 0o660);
    }

    #[test]
    fn the_policy_is_read_from_the_pod_and_unknown_ones_refused() {
        let pod = |sc: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"},
                "spec": {"containers": [], "securityContext": sc}}))
            .unwrap()
        };
        assert_eq!(
            change_policy(&pod(json!({}))).unwrap(),
            ChangePolicy::Always
        );
        assert_eq!(
            change_policy(&pod(json!({"fsGroupChangePolicy": "Always"}))).unwrap(),
            ChangePolicy::Always
        );
        assert_eq!(
            change_policy(&pod(json!({"fsGroupChangePolicy": "OnRootMismatch"}))).unwrap(),
            ChangePolicy::OnRootMismatch
        );
        let e = change_policy(&pod(json!({"fsGroupChangePolicy": "Sometimes"}))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Unsupported value: \"Sometimes\": supported values: \"OnRootMismatch\", \"Always\""
        );
    }
}
