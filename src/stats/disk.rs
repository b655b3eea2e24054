//! Filesystem capacity (statvfs) and directory usage (a `du`-like walk).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{Result, StatsError};

/// What statvfs says about the filesystem holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsCapacity {
    pub capacity: u64,
    pub available: u64,
    /// Blocks in use by anyone (capacity minus free, root-reserved included), as cAdvisor's
    /// filesystem "usage".
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

impl FsCapacity {
    pub fn inodes_used(&self) -> u64 {
        self.inodes.saturating_sub(self.inodes_free)
    }
}

pub fn statvfs(path: &Path) -> Result<FsCapacity> {
    let s = nix::sys::statvfs::statvfs(path).map_err(|source| StatsError::Statvfs {
        path: path.to_path_buf(),
        source,
    })?;
    let frsize = s.fragment_size() as u64;
    Ok(FsCapacity {
        capacity: s.blocks() as u64 * frsize,
        available: s.blocks_available() as u64 * frsize,
        used: (s.blocks() as u64).saturating_sub(s.blocks_free() as u64) * frsize,
        inodes: s.files() as u64,
        inodes_free: s.files_free() as u64,
    })
}

/// The size of the block device at `path` (a link to it will do), as upstream's MetricsBlock
/// finds it: the offset of its end.
pub fn device_size(path: &Path) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(path)
        .and_then(|mut f| f.seek(SeekFrom::End(0)))
        .map_err(|e| StatsError::read(path, e))
}

/// Bytes on disk and inodes under a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
}

impl std::ops::Add for DiskUsage {
    type Output = DiskUsage;
    fn add(self, o: DiskUsage) -> DiskUsage {
        DiskUsage {
            bytes: self.bytes + o.bytes,
            inodes: self.inodes + o.inodes,
        }
    }
}

/// Walks `dir` without following symlinks or crossing into other filesystems, counting
/// allocated blocks (`st_blocks * 512`, as du does) and inodes; hard links count once.
/// Entries that vanish during the walk are skipped: container layers and logs change
/// while they are measured.
pub fn disk_usage(dir: &Path) -> Result<DiskUsage> {
    let top = std::fs::symlink_metadata(dir).map_err(|e| StatsError::read(dir, e))?;
    let dev = top.dev();
    let mut seen = HashSet::new();
    let mut usage = DiskUsage::default();
    let mut stack = vec![(dir.to_path_buf(), top)];
    while let Some((path, meta)) = stack.pop() {
        if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        usage.bytes += meta.blocks() * 512;
        usage.inodes += 1;
        if !meta.is_dir() || meta.dev() != dev {
            continue;
        }
        let entries = match std::fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StatsError::read(&path, e)),
        };
        for entry in entries.flatten() {
            if let Ok(m) = entry.metadata() {
                stack.push((entry.path(), m));
            }
        }
    }
    Ok(usage)
}

/// Walks are expensive, so each path's usage is reused until it is older than `max_age`
/// (cAdvisor likewise measures disk on a slower cadence than cpu and memory).
#[derive(Debug)]
pub struct DiskUsageCache {
    max_age: Duration,
    entries: HashMap<PathBuf, (Instant, DiskUsage)>,
}

impl DiskUsageCache {
    pub fn new(max_age: Duration) -> Self {
        DiskUsageCache {
            max_age,
            entries: HashMap::new(),
        }
    }

    pub fn get(&mut self, dir: &Path, now: Instant) -> Result<DiskUsage> {
        if let Some((at, u)) = self.entries.get(dir) {
            if now.saturating_duration_since(*at) < self.max_age {
                return Ok(*u);
            }
        }
        let u = disk_usage(dir)?;
        self.entries.insert(dir.to_path_buf(), (now, u));
        Ok(u)
    }

    /// Drops entries for paths no longer asked for, so removed containers do not pile up.
    pub fn retain(&mut self, keep: &HashSet<PathBuf>) {
        self.entries.retain(|p, _| keep.contains(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statvfs_of_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let s = statvfs(dir.path()).unwrap();
        assert!(s.capacity > 0 && s.capacity >= s.available);
        assert!(s.used <= s.capacity);
        let err = statvfs(Path::new("/no/such/dir/for/stats")).unwrap_err();
        assert!(err.to_string().contains("/no/such/dir/for/stats"), "{err}");
    }

    #[test]
    fn walk_counts_blocks_inodes_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("upper/etc");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("a"), vec![7u8; 64 * 1024]).unwrap();
        std::fs::hard_link(sub.join("a"), sub.join("b")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", sub.join("link")).unwrap();
        let u = disk_usage(&dir.path().join("upper")).unwrap();
        // upper, etc, a (b is the same inode), link
        assert_eq!(u.inodes, 4);
        assert!(u.bytes >= 64 * 1024, "{u:?}");
        assert!(
            u.bytes < 64 * 1024 * 2 + 64 * 1024,
            "hard link counted twice: {u:?}"
        );
    }

    #[test]
    fn cache_reuses_until_stale() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = DiskUsageCache::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let first = c.get(dir.path(), t0).unwrap();
        std::fs::write(dir.path().join("f"), vec![1u8; 8192]).unwrap();
        assert_eq!(
            c.get(dir.path(), t0 + Duration::from_secs(1)).unwrap(),
            first
        );
        let later = c.get(dir.path(), t0 + Duration::from_secs(61)).unwrap();
        assert_eq!(later.inodes, first.inodes + 1);
        c.retain(&HashSet::new());
        assert!(c.entries.is_empty());
    }
}
