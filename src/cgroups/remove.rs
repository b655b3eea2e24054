//! Removing a cgroup from every hierarchy it may be in.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the host mounts its cgroup hierarchies.
pub const HOST_ROOT: &str = "/sys/fs/cgroup";

/// Removes `cgroup` from every hierarchy under the host's /sys/fs/cgroup (for callers
/// without a manager: pods' cgroups with cgroupsPerQOS off). Blocking.
pub fn remove_on_host(cgroup: &str) -> Vec<PathBuf> {
    remove_everywhere(Path::new(HOST_ROOT), cgroup)
}

/// Removes the cgroup `cgroup` (an absolute path within a hierarchy) from the hierarchy
/// mounted at `root` and from every hierarchy mounted in a folder of `root` (the v1
/// controllers). Leaf containers' cgroups are removed by runc; this takes the pod level
/// (and any leaf runc left in freezer, devices, ...). A cgroup whose last process was only
/// just killed stays busy for a moment, so a busy directory is tried again for up to two
/// seconds; what still exists after that is returned. Blocking.
pub(crate) fn remove_everywhere(root: &Path, cgroup: &str) -> Vec<PathBuf> {
    let rel = cgroup.trim_start_matches('/');
    if rel.is_empty() {
        // Never the hierarchy's root.
        return Vec::new();
    }
    let mut dirs = vec![root.join(rel)];
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            dirs.push(e.path().join(rel));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut delay = Duration::from_millis(20);
    loop {
        dirs.retain(|d| !remove_tree(d));
        if dirs.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(400));
    }
    dirs
}

/// Removes a cgroup directory, its child directories first; true when it is gone.
fn remove_tree(dir: &Path) -> bool {
    if !dir.is_dir() {
        return true;
    }
    if let Ok(children) = std::fs::read_dir(dir) {
        for c in children.flatten() {
            if c.path().is_dir() {
                remove_tree(&c.path());
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hierarchy_loses_the_cgroup_and_the_root_stays() {
        let root = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "freezer"] {
            std::fs::create_dir_all(root.path().join(c).join("kubepods/podu/leaf")).unwrap();
        }
        std::fs::create_dir_all(root.path().join("kubepods/podu")).unwrap();
        let left = remove_everywhere(root.path(), "/kubepods/podu");
        assert!(left.is_empty(), "{left:?}");
        for c in ["cpu", "memory", "freezer"] {
            assert!(!root.path().join(c).join("kubepods/podu").exists());
            assert!(root.path().join(c).join("kubepods").is_dir());
        }
        assert!(!root.path().join("kubepods/podu").exists());
        assert!(remove_everywhere(root.path(), "/").is_empty());
        assert!(
            root.path().join("cpu").is_dir(),
            "never the hierarchy's root"
        );
    }
}
