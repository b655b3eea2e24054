//! Network namespaces pinned to a file, the way containerd's CRI plugin keeps a pod's netns
//! alive independently of any process: an empty file bind-mounted over with the nsfs inode.
//!
//! `unshare(CLONE_NEWNET)` moves the *calling thread* into the new namespace and there is no
//! cheap way to be sure it is moved back, so it only ever runs on a throwaway std thread that
//! exits right after the bind mount. Tokio workers and the spawn_blocking pool are reused for
//! other work and must never end up in a pod's namespace.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::statfs::{statfs, NSFS_MAGIC};
use tokio::sync::oneshot;

use super::NetworkError;

/// Where pinned namespaces live by default (`ip netns` looks here too).
pub const DEFAULT_NETNS_DIR: &str = "/var/run/netns";

/// A bind mount can be stacked by accident (two pins racing on one path); more than a few
/// layers means something else is wrong, so removal stops there instead of looping forever.
const MAX_STACKED_MOUNTS: usize = 8;

/// A fresh name in containerd's format: `cni-` and 16 random bytes laid out like a UUID.
pub fn new_netns_name() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "cni-{}-{}-{}-{}-{}",
        hex::encode(&b[0..4]),
        hex::encode(&b[4..6]),
        hex::encode(&b[6..8]),
        hex::encode(&b[8..10]),
        hex::encode(&b[10..16])
    )
}

/// Creates `<dir>/<name>` and pins a new, empty network namespace on it. Blocks the caller
/// for the duration of a thread spawn and two syscalls; async code should use [`pin`].
pub fn pin_netns(dir: &Path, name: &str) -> Result<PathBuf, NetworkError> {
    validate_name(name)?;
    let (dir, name) = (dir.to_path_buf(), name.to_string());
    let path = dir.join(&name);
    std::thread::Builder::new()
        .name("netns-pin".into())
        .spawn(move || pin_on_throwaway_thread(&dir, &name))
        .map_err(|source| NetworkError::Netns {
            path: path.clone(),
            action: "spawning the pinning thread",
            source,
        })?
        .join()
        .map_err(|_| NetworkError::NetnsThread { path })?
}

/// [`pin_netns`] for async callers: the work runs on its own throwaway thread and the answer
/// comes back over a oneshot, so no tokio thread blocks or changes namespace.
pub async fn pin(dir: &Path, name: &str) -> Result<PathBuf, NetworkError> {
    validate_name(name)?;
    let (dir, name) = (dir.to_path_buf(), name.to_string());
    let path = dir.join(&name);
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("netns-pin".into())
        .spawn(move || {
            // The receiver may be gone if the caller was cancelled; the pinned file then
            // leaks until the caller's next sync removes it, as with any crash.
            let _ = tx.send(pin_on_throwaway_thread(&dir, &name));
        })
        .map_err(|source| NetworkError::Netns {
            path: path.clone(),
            action: "spawning the pinning thread",
            source,
        })?;
    rx.await.map_err(|_| NetworkError::NetnsThread { path })?
}

/// Unmounts and deletes a pinned namespace. Idempotent: a path that is not mounted or does
/// not exist is success. The namespace itself dies once no process and no mount hold it.
pub fn remove_netns(path: &Path) -> Result<(), NetworkError> {
    for _ in 0..MAX_STACKED_MOUNTS {
        // Only nsfs mounts are ours to undo; a plain file just gets deleted below.
        if !netns_exists(path) {
            break;
        }
        match umount2(path, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            // EINVAL: not a mount point (any more); ENOENT: already gone.
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
            Err(e) => {
                return Err(NetworkError::Netns {
                    path: path.to_path_buf(),
                    action: "unmount",
                    source: io::Error::from(e),
                })
            }
        }
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(NetworkError::Netns {
            path: path.to_path_buf(),
            action: "remove",
            source,
        }),
    }
}

/// [`remove_netns`] off the tokio workers (umount can block on a busy mount table).
pub async fn remove(path: &Path) -> Result<(), NetworkError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || remove_netns(&owned))
        .await
        .map_err(|_| NetworkError::NetnsThread {
            path: path.to_path_buf(),
        })?
}

/// True if `path` is a live pinned namespace, i.e. an nsfs mount. Used on agent restart: a
/// plain file left behind (say, after a reboot cleared the mount) is not a namespace.
pub fn netns_exists(path: &Path) -> bool {
    matches!(statfs(path), Ok(fs) if fs.filesystem_type() == NSFS_MAGIC)
}

fn validate_name(name: &str) -> Result<(), NetworkError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name == "." || name == ".." {
        "not a file name"
    } else if name.contains('/') || name.contains('\0') {
        "contains '/' or NUL"
    } else {
        return Ok(());
    };
    Err(NetworkError::InvalidNetnsName {
        name: name.to_string(),
        reason,
    })
}

/// Leaves the calling thread inside the new namespace: call it only on a thread that exits
/// right afterwards.
fn pin_on_throwaway_thread(dir: &Path, name: &str) -> Result<PathBuf, NetworkError> {
    let path = dir.join(name);
    let err = |action, source| NetworkError::Netns {
        path: path.clone(),
        action,
        source,
    };
    fs::create_dir_all(dir).map_err(|e| err("creating its directory", e))?;
    // O_EXCL: never pin over (or later unmount) a namespace some other pod owns.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
        .map_err(|e| err("creating the mount point", e))?;

    let pinned = unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|e| err("unshare(CLONE_NEWNET)", io::Error::from(e)))
        .and_then(|()| {
            let source = format!("/proc/self/task/{}/ns/net", nix::unistd::gettid());
            mount(
                Some(source.as_str()),
                &path,
                Some("none"),
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| err("bind mount", io::Error::from(e)))
        });
    if let Err(e) = pinned {
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_look_like_containerds() {
        let name = new_netns_name();
        let parts: Vec<&str> = name.split('-').collect();
        assert_eq!(parts[0], "cni");
        let lens: Vec<usize> = parts[1..].iter().map(|p| p.len()).collect();
        assert_eq!(lens, vec![8, 4, 4, 4, 12]);
        assert!(parts[1..]
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit())));
        assert_ne!(name, new_netns_name());
    }

    #[test]
    fn bad_names_are_refused_before_touching_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", ".", "..", "a/b"] {
            let err = pin_netns(dir.path(), bad).unwrap_err();
            assert!(
                matches!(err, NetworkError::InvalidNetnsName { .. }),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_existing_file_is_never_pinned_over() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("taken"), b"").unwrap();
        let err = pin_netns(dir.path(), "taken").unwrap_err();
        assert!(
            err.to_string().contains("creating the mount point"),
            "{err}"
        );
        // The failure must not delete a file it did not create.
        assert!(dir.path().join("taken").exists());
    }

    #[test]
    fn removing_twice_or_a_missing_path_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        fs::write(&plain, b"").unwrap();
        assert!(!netns_exists(&plain));
        remove_netns(&plain).unwrap();
        assert!(!plain.exists());
        remove_netns(&plain).unwrap();
        assert!(!netns_exists(&dir.path().join("never-there")));
    }

    #[tokio::test]
    #[ignore = "needs root: run hack/test.sh"]
    async fn pin_and_remove_as_root() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "pinning a network namespace needs root"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = pin(dir.path(), &new_netns_name()).await.unwrap();
        let outcome = std::panic::catch_unwind(|| {
            assert!(netns_exists(&path));
            let ours = fs::read_link("/proc/thread-self/ns/net").unwrap();
            let pinned = fs::metadata(&path).unwrap();
            let current = fs::metadata("/proc/thread-self/ns/net").unwrap();
            use std::os::unix::fs::MetadataExt;
            // A different namespace from ours, and this thread did not move into it.
            assert_ne!(pinned.ino(), current.ino(), "ours is {ours:?}");
        });
        remove(&path).await.unwrap();
        assert!(!path.exists());
        remove(&path).await.unwrap();
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    }
}
