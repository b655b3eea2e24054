//! The mount syscalls volumes need (tmpfs mount, unmount, "is this a mount point"), behind
//! a trait so the volume logic is tested without root. Every call blocks: callers run on a
//! blocking thread, never on a tokio worker.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub trait Mounter: Send + Sync {
    /// The filesystem type mounted exactly at `path`, None when `path` is no mount point.
    fn mounted_fs(&self, path: &Path) -> io::Result<Option<String>>;
    /// Mounts a new tmpfs at `path` with the given `-o` options (comma separated).
    fn mount_tmpfs(&self, path: &Path, options: &[String]) -> io::Result<()>;
    fn unmount(&self, path: &Path) -> io::Result<()>;
    /// Bind-mounts `source` (not recursively, as upstream's subPath mounts) onto `target`.
    fn bind(&self, source: &Path, target: &Path) -> io::Result<()>;
    /// Makes the bind mount at `target` read-only.
    fn remount_read_only(&self, target: &Path) -> io::Result<()>;
    /// Every mount point at or below `dir`.
    fn mounts_under(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Holds the device bound onto the map file `file` open (upstream's descriptor lock, a
    /// loop device over it: `loop_lock`). Idempotent.
    fn lock_device(&self, file: &Path) -> io::Result<()>;
    /// Releases `lock_device`'s hold; nothing to do when none is held. Until then the map
    /// file's bind cannot be unmounted.
    fn unlock_device(&self, file: &Path) -> io::Result<()>;
}

/// The host's mount table, through the kernel.
pub struct SysMounter;

/// Whether the kernel's tmpfs takes `noswap` (6.4+): 0 unknown, 1 yes, 2 no.
static NOSWAP: AtomicU8 = AtomicU8::new(0);

impl Mounter for SysMounter {
    fn mounted_fs(&self, path: &Path) -> io::Result<Option<String>> {
        // mountinfo lists canonical paths; a symlinked root dir must not hide a mount.
        let path = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let table = std::fs::read_to_string("/proc/self/mountinfo")?;
        // The last entry wins: a later mount on the same point hides the earlier ones.
        Ok(parse_mountinfo(&table)
            .into_iter()
            .rev()
            .find(|(point, _)| *point == path)
            .map(|(_, fs)| fs))
    }

    fn mount_tmpfs(&self, path: &Path, options: &[String]) -> io::Result<()> {
        // Upstream asks for `noswap` when the kernel knows it, so memory-backed volumes
        // (which may hold secrets) never reach swap; older kernels refuse it with EINVAL.
        if NOSWAP.load(Ordering::Relaxed) != 2 {
            let mut with = options.to_vec();
            with.push("noswap".into());
            match raw_tmpfs(path, &with) {
                Ok(()) => {
                    NOSWAP.store(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    NOSWAP.store(2, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        raw_tmpfs(path, options)
    }

    fn unmount(&self, path: &Path) -> io::Result<()> {
        umount2(path, MntFlags::UMOUNT_NOFOLLOW).map_err(io::Error::from)
    }

    fn bind(&self, source: &Path, target: &Path) -> io::Result<()> {
        mount(
            Some(source),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(io::Error::from)
    }

    fn remount_read_only(&self, target: &Path) -> io::Result<()> {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(io::Error::from)
    }

    fn mounts_under(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let dir = match std::fs::canonicalize(dir) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let table = std::fs::read_to_string("/proc/self/mountinfo")?;
        Ok(parse_mountinfo(&table)
            .into_iter()
            .map(|(point, _)| point)
            .filter(|p| p.starts_with(&dir))
            .collect())
    }

    fn lock_device(&self, file: &Path) -> io::Result<()> {
        super::loop_lock::attach(file)
    }

    fn unlock_device(&self, file: &Path) -> io::Result<()> {
        super::loop_lock::detach(file)
    }
}

fn raw_tmpfs(path: &Path, options: &[String]) -> io::Result<()> {
    let data = options.join(",");
    mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::empty(),
        (!data.is_empty()).then_some(data.as_str()),
    )
    .map_err(io::Error::from)
}

/// (mount point, filesystem type) of each line of /proc/<pid>/mountinfo.
pub fn parse_mountinfo(table: &str) -> Vec<(PathBuf, String)> {
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?;
            // Optional fields end with a lone "-"; the filesystem type follows it.
            let sep = fields.iter().position(|f| *f == "-")?;
            let fs = fields.get(sep + 1)?;
            Some((PathBuf::from(unescape(point)), fs.to_string()))
        })
        .collect()
}

/// The kernel writes space, tab, newline and backslash in paths as `\ooo` octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Records mounts in memory, for tests that run without root.
#[cfg(test)]
#[derive(Default)]
pub struct FakeMounter {
    pub mounted: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
    pub calls: std::sync::Mutex<Vec<(PathBuf, Vec<String>)>>,
    /// Each bind: the path the source resolved to when bound, and the target.
    pub binds: std::sync::Mutex<Vec<(PathBuf, PathBuf)>>,
    /// Bind mounts made read-only.
    pub read_only: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
    /// Map files whose device is held open (`lock_device`): unmounting one is EBUSY, as
    /// the kernel has it while the loop device holds the file.
    pub locked: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
}

#[cfg(test)]
impl Mounter for FakeMounter {
    fn mounted_fs(&self, p: &Path) -> io::Result<Option<String>> {
        Ok(self
            .mounted
            .lock()
            .unwrap()
            .contains(p)
            .then(|| "tmpfs".to_string()))
    }
    fn mount_tmpfs(&self, p: &Path, o: &[String]) -> io::Result<()> {
        self.mounted.lock().unwrap().insert(p.to_path_buf());
        self.calls
            .lock()
            .unwrap()
            .push((p.to_path_buf(), o.to_vec()));
        Ok(())
    }
    fn unmount(&self, p: &Path) -> io::Result<()> {
        if self.locked.lock().unwrap().contains(p) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.mounted.lock().unwrap().remove(p);
        Ok(())
    }
    fn bind(&self, source: &Path, target: &Path) -> io::Result<()> {
        // What a `/proc/self/fd/N` source stands for, read now, while the fd is open.
        let resolved = std::fs::read_link(source).unwrap_or_else(|_| source.to_path_buf());
        self.binds
            .lock()
            .unwrap()
            .push((resolved, target.to_path_buf()));
        self.mounted.lock().unwrap().insert(target.to_path_buf());
        Ok(())
    }
    fn remount_read_only(&self, target: &Path) -> io::Result<()> {
        self.read_only.lock().unwrap().insert(target.to_path_buf());
        Ok(())
    }
    fn mounts_under(&self, d: &Path) -> io::Result<Vec<PathBuf>> {
        let m = self.mounted.lock().unwrap();
        Ok(m.iter().filter(|p| p.starts_with(d)).cloned().collect())
    }
    fn lock_device(&self, file: &Path) -> io::Result<()> {
        self.locked.lock().unwrap().insert(file.to_path_buf());
        Ok(())
    }
    fn unlock_device(&self, file: &Path) -> io::Result<()> {
        self.locked.lock().unwrap().remove(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_point_and_type() {
        let table = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                     99 27 0:50 / /var/lib/a\\040b rw shared:5 master:1 - tmpfs tmpfs rw,size=10k\n";
        let m = parse_mountinfo(table);
        assert_eq!(m[0], (PathBuf::from("/proc"), "proc".to_string()));
        assert_eq!(m[1], (PathBuf::from("/var/lib/a b"), "tmpfs".to_string()));
    }

    #[test]
    fn root_is_a_mount_point_and_a_fresh_dir_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(SysMounter.mounted_fs(Path::new("/")).unwrap().is_some());
        assert_eq!(SysMounter.mounted_fs(tmp.path()).unwrap(), None);
        assert_eq!(
            SysMounter.mounted_fs(&tmp.path().join("missing")).unwrap(),
            None
        );
    }
}
