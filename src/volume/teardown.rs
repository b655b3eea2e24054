//! Removing a gone pod's volumes: unmount the subPath bind mounts under
//! `<pod_dir>/volume-subpaths`, then what is mounted under `<pod_dir>/volumes` (the
//! memory-backed volumes, and anything a container propagated there), and delete both
//! trees without ever crossing into another filesystem or following a symlink, so neither
//! a hostPath nor a mount left behind can lose data. A tree is removed only once nothing
//! is mounted under it any more: a subPath bound from a disk-backed emptyDir is on the
//! same device as the pod dir, so the device check alone would not stop the removal.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tracing::info;

use super::mounter::Mounter;
use super::subpath::SUBPATHS_DIR;
use super::VolumeError;

/// How many rounds of unmounting before giving up (mounts stacked on one point need one
/// round each).
const UNMOUNT_ROUNDS: usize = 8;

fn err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let path = path.to_path_buf();
    move |source| VolumeError::TearDown { op, path, source }
}

pub fn teardown(pod_dir: &Path, m: &dyn Mounter) -> Result<(), VolumeError> {
    // The subPath binds first: they hold views into the volumes.
    unmount_and_remove(&pod_dir.join(SUBPATHS_DIR), m)?;
    unmount_and_remove(&pod_dir.join("volumes"), m)?;
    // Only links to devices are left there once the block volumes are unmapped (before).
    unmount_and_remove(&pod_dir.join(super::block::VOLUME_DEVICES_DIR), m)
}

/// Unmounts everything at or below `root` (deepest first), then removes `root`.
fn unmount_and_remove(root: &Path, m: &dyn Mounter) -> Result<(), VolumeError> {
    let root = root.to_path_buf();
    match fs::symlink_metadata(&root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("stat", &root)(e)),
        Ok(meta) if !meta.is_dir() => {
            return fs::remove_file(&root).map_err(err("remove", &root));
        }
        Ok(_) => {}
    }
    for _ in 0..UNMOUNT_ROUNDS {
        let mut points = m
            .mounts_under(&root)
            .map_err(err("list mounts under", &root))?;
        if points.is_empty() {
            break;
        }
        // Deepest first: a mount cannot go while another sits on top of it.
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        points.dedup();
        for p in points {
            m.unmount(&p).map_err(err("unmount", &p))?;
            info!(path = %p.display(), "unmounted pod volume");
        }
    }
    let left = m
        .mounts_under(&root)
        .map_err(err("list mounts under", &root))?;
    if let Some(p) = left.first() {
        return Err(err("unmount", p)(io::Error::other(
            "still mounted; refusing to remove the pod's volumes",
        )));
    }
    remove_one_filesystem(&root)
}

/// `rm -r` that stays on `dir`'s filesystem: a directory on another device is a mount
/// point the check above missed, and is an error rather than something to empty.
fn remove_one_filesystem(dir: &Path) -> Result<(), VolumeError> {
    let dev = fs::symlink_metadata(dir).map_err(err("stat", dir))?.dev();
    remove_tree(dir, dev)
}

fn remove_tree(dir: &Path, dev: u64) -> Result<(), VolumeError> {
    for entry in fs::read_dir(dir).map_err(err("read", dir))? {
        let path = entry.map_err(err("read", dir))?.path();
        let meta = fs::symlink_metadata(&path).map_err(err("stat", &path))?;
        if meta.is_dir() {
            if meta.dev() != dev {
                return Err(err("remove", &path)(io::Error::other(
                    "is on another filesystem (a mount point); refusing to cross it",
                )));
            }
            remove_tree(&path, dev)?;
        } else {
            // Symlinks included: the link goes, never what it points to.
            fs::remove_file(&path).map_err(err("remove", &path))?;
        }
    }
    fs::remove_dir(dir).map_err(err("remove", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mounter::FakeMounter;
    use std::os::unix::fs::symlink;

    #[test]
    fn removes_volumes_but_never_what_links_point_to() {
        let tmp = tempfile::tempdir().unwrap();
        let pod_dir = tmp.path().join("pod");
        let host = tmp.path().join("host");
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("precious"), "keep").unwrap();
        let ed = pod_dir.join("volumes/kubernetes.io~empty-dir/cache");
        fs::create_dir_all(ed.join("deep")).unwrap();
        fs::write(ed.join("deep/f"), "x").unwrap();
        symlink(&host, ed.join("to-host")).unwrap();
        symlink(host.join("precious"), ed.join("to-file")).unwrap();
        let m = FakeMounter::default();
        let mem = pod_dir.join("volumes/kubernetes.io~empty-dir/mem");
        fs::create_dir_all(&mem).unwrap();
        m.mounted.lock().unwrap().insert(mem.clone());

        teardown(&pod_dir, &m).unwrap();
        assert!(!pod_dir.join("volumes").exists());
        assert!(m.mounted.lock().unwrap().is_empty(), "tmpfs unmounted");
        assert_eq!(fs::read_to_string(host.join("precious")).unwrap(), "keep");
        assert!(pod_dir.exists(), "the pod dir itself is the caller's");
        // Idempotent.
        teardown(&pod_dir, &m).unwrap();
        teardown(&tmp.path().join("never-existed"), &m).unwrap();
    }

    #[test]
    fn refuses_to_cross_a_mount_it_cannot_remove() {
        struct Stuck;
        impl Mounter for Stuck {
            fn mounted_fs(&self, _: &Path) -> io::Result<Option<String>> {
                Ok(Some("tmpfs".into()))
            }
            fn mount_tmpfs(&self, _: &Path, _: &[String]) -> io::Result<()> {
                Ok(())
            }
            fn unmount(&self, _: &Path) -> io::Result<()> {
                Err(io::Error::from_raw_os_error(libc::EBUSY))
            }
            fn bind(&self, _: &Path, _: &Path) -> io::Result<()> {
                Ok(())
            }
            fn remount_read_only(&self, _: &Path) -> io::Result<()> {
                Ok(())
            }
            fn mounts_under(&self, d: &Path) -> io::Result<Vec<std::path::PathBuf>> {
                Ok(vec![d.join("kubernetes.io~empty-dir/m")])
            }
            fn lock_device(&self, _: &Path) -> io::Result<()> {
                Ok(())
            }
            fn unlock_device(&self, _: &Path) -> io::Result<()> {
                Ok(())
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("volumes/kubernetes.io~empty-dir/m");
        fs::create_dir_all(&vol).unwrap();
        fs::write(vol.join("data"), "x").unwrap();
        let e = teardown(tmp.path(), &Stuck).unwrap_err().to_string();
        assert!(e.contains("unmount"), "{e}");
        assert!(vol.join("data").exists(), "nothing removed while mounted");
    }
}
