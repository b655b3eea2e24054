//! Writing cgroup directories and limits through the cgroup filesystem, v1 or v2.
//!
//! The mode is chosen as `stats::cgroup` chooses it: cgroup2 mounted at /sys/fs/cgroup is a
//! unified host; otherwise the v1 controllers' mounts are used (a hybrid host's extra
//! cgroup2 tree at /sys/fs/cgroup/unified holds no controllers). On v1 the agent's cgroups
//! are made in the cpu, cpuacct, memory and pids hierarchies (the ones it limits or reads);
//! runc makes a container's own leaf in every hierarchy when it starts it.

use std::io;
use std::path::{Path, PathBuf};

use crate::stats::parse::{
    any_unified, parse_mountinfo, unified_at_sys_fs_cgroup, v1_hierarchy, MountEntry,
};

/// Upstream's CFS constants (pkg/kubelet/cm helpers_linux.go).
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
pub const QUOTA_PERIOD: u64 = 100_000;
const MIN_QUOTA_PERIOD: i64 = 1000;

/// What one cgroup is set to; `None` leaves that setting as it is (upstream's nil
/// pointers in ResourceConfig).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    pub cpu_shares: Option<u64>,
    /// -1 is no quota.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    /// Bytes.
    pub memory: Option<i64>,
    /// -1 (or any value below 1) is no limit.
    pub pids: Option<i64>,
}

/// milliCPU as cpu.shares: upstream's MilliCPUToShares (2 for zero, clamped to the kernel's
/// range).
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    let shares = (milli as i128 * 1024 / 1000) as u64;
    shares.clamp(MIN_SHARES, MAX_SHARES)
}

/// milliCPU as a CFS quota over `period` microseconds: upstream's MilliCPUToQuota (0 for no
/// limit, at least 1 ms).
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    let quota = (milli as i128 * period as i128 / 1000) as i64;
    quota.max(MIN_QUOTA_PERIOD)
}

/// cgroup v1 cpu.shares as cgroup v2 cpu.weight, upstream's conversion
/// (KEP 2254: weight = 1 + (shares − 2) × 9999 / 262142).
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + (shares - 2) * 9999 / 262_142
}

/// Errors writing cgroups, each naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("no {controller} cgroup hierarchy in {mountinfo}")]
    NoHierarchy {
        mountinfo: PathBuf,
        controller: &'static str,
    },
    #[error("mount table {path}: {message}")]
    Mounts { path: PathBuf, message: String },
    #[error("creating {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    /// Lowering a memory limit below what the cgroup already uses would make the kernel
    /// reclaim and then OOM-kill its processes (v2), or fail with EBUSY (v1); the limit is
    /// left as it is and tried again later, as upstream retries node allocatable.
    #[error("memory limit {limit} of {cgroup} is below its usage {usage}; left unchanged")]
    MemoryBelowUsage {
        cgroup: String,
        limit: i64,
        usage: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    V1 {
        cpu: PathBuf,
        cpuacct: PathBuf,
        memory: PathBuf,
        pids: Option<PathBuf>,
    },
    V2 {
        root: PathBuf,
    },
}

/// The host's cgroup hierarchies, for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFs {
    layout: Layout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl CgroupFs {
    /// From /proc/self/mountinfo.
    pub fn detect() -> Result<CgroupFs, CgroupError> {
        let path = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(path).map_err(|source| CgroupError::Read {
            path: path.into(),
            source,
        })?;
        let mounts = parse_mountinfo(path, &text).map_err(|e| CgroupError::Mounts {
            path: path.into(),
            message: e.to_string(),
        })?;
        Self::from_mounts(path, &mounts)
    }

    pub(crate) fn from_mounts(
        mountinfo: &Path,
        mounts: &[MountEntry],
    ) -> Result<CgroupFs, CgroupError> {
        if let Some(m) = unified_at_sys_fs_cgroup(mounts) {
            return Ok(Self::v2_at(&m.mount_point));
        }
        let v1 = |controller: &str| {
            v1_hierarchy(mounts, controller).map(|m| PathBuf::from(&m.mount_point))
        };
        let need = |controller: &'static str| {
            v1(controller).ok_or_else(|| CgroupError::NoHierarchy {
                mountinfo: mountinfo.into(),
                controller,
            })
        };
        match (need("cpu"), need("memory")) {
            (Ok(cpu), Ok(memory)) => Ok(CgroupFs {
                layout: Layout::V1 {
                    cpuacct: v1("cpuacct").unwrap_or_else(|| cpu.clone()),
                    cpu,
                    memory,
                    pids: v1("pids"),
                },
            }),
            (Err(e), _) | (_, Err(e)) => match any_unified(mounts) {
                Some(m) => Ok(Self::v2_at(&m.mount_point)),
                None => Err(e),
            },
        }
    }

    /// A unified hierarchy at `root` (unit tests pass a temporary folder).
    pub fn v2_at(root: impl AsRef<Path>) -> CgroupFs {
        CgroupFs {
            layout: Layout::V2 {
                root: root.as_ref().into(),
            },
        }
    }

    /// v1 hierarchies at `root/{cpu,cpuacct,memory,pids}` (unit tests pass a temporary folder).
    pub fn v1_at(root: impl AsRef<Path>) -> CgroupFs {
        let r = root.as_ref();
        CgroupFs {
            layout: Layout::V1 {
                cpu: r.join("cpu"),
                cpuacct: r.join("cpuacct"),
                memory: r.join("memory"),
                pids: Some(r.join("pids")),
            },
        }
    }

    pub fn version(&self) -> Version {
        match self.layout {
            Layout::V1 { .. } => Version::V1,
            Layout::V2 { .. } => Version::V2,
        }
    }

    fn rel(cgroup: &str) -> &str {
        cgroup.trim_start_matches('/')
    }

    /// Every directory that is this cgroup (one per hierarchy the agent uses).
    pub fn dirs(&self, cgroup: &str) -> Vec<PathBuf> {
        let rel = Self::rel(cgroup);
        match &self.layout {
            Layout::V1 {
                cpu,
                cpuacct,
                memory,
                pids,
            } => {
                let mut out = vec![cpu.join(rel)];
                if cpuacct != cpu {
                    out.push(cpuacct.join(rel));
                }
                out.push(memory.join(rel));
                out.extend(pids.iter().map(|p| p.join(rel)));
                out
            }
            Layout::V2 { root } => vec![root.join(rel)],
        }
    }

    fn cpu_dir(&self, cgroup: &str) -> PathBuf {
        match &self.layout {
            Layout::V1 { cpu, .. } => cpu.join(Self::rel(cgroup)),
            Layout::V2 { root } => root.join(Self::rel(cgroup)),
        }
    }

    pub(crate) fn memory_dir(&self, cgroup: &str) -> PathBuf {
        match &self.layout {
            Layout::V1 { memory, .. } => memory.join(Self::rel(cgroup)),
            Layout::V2 { root } => root.join(Self::rel(cgroup)),
        }
    }

    fn pids_dir(&self, cgroup: &str) -> Option<PathBuf> {
        match &self.layout {
            Layout::V1 { pids, .. } => pids.as_ref().map(|p| p.join(Self::rel(cgroup))),
            Layout::V2 { root } => Some(root.join(Self::rel(cgroup))),
        }
    }

    /// True when the cgroup exists in every hierarchy the agent writes.
    pub fn exists(&self, cgroup: &str) -> bool {
        self.dirs(cgroup).iter().all(|d| d.is_dir())
    }

    /// Makes the cgroup (and its parents) in every hierarchy. On v2 the cpu, memory and pids
    /// controllers are enabled for the children of each ancestor first, or the new cgroup
    /// would have no files to limit. Creating an existing cgroup changes nothing in it.
    pub fn create(&self, cgroup: &str) -> Result<(), CgroupError> {
        let _timed = crate::metrics::cgroup_op("create");
        if let Layout::V2 { root } = &self.layout {
            let mut dir = root.clone();
            let parts: Vec<&str> = Self::rel(cgroup)
                .split('/')
                .filter(|p| !p.is_empty())
                .collect();
            for part in parts {
                enable_controllers(&dir);
                dir = dir.join(part);
                make_dir(&dir)?;
            }
            return Ok(());
        }
        for dir in self.dirs(cgroup) {
            make_dir(&dir)?;
        }
        Ok(())
    }

    /// Writes the settings `config` has. The memory limit goes last, and only when it is not
    /// below the cgroup's current usage (see `CgroupError::MemoryBelowUsage`).
    pub fn apply(&self, cgroup: &str, config: &ResourceConfig) -> Result<(), CgroupError> {
        let _timed = crate::metrics::cgroup_op("update");
        let cpu = self.cpu_dir(cgroup);
        match self.version() {
            Version::V1 => {
                if let Some(shares) = config.cpu_shares {
                    write(&cpu.join("cpu.shares"), &shares.to_string())?;
                }
                // The period first: a quota is checked against the period in force.
                if let Some(period) = config.cpu_period {
                    write(&cpu.join("cpu.cfs_period_us"), &period.to_string())?;
                }
                if let Some(quota) = config.cpu_quota {
                    let quota = if quota > 0 { quota } else { -1 };
                    write(&cpu.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
            Version::V2 => {
                if let Some(shares) = config.cpu_shares {
                    write(
                        &cpu.join("cpu.weight"),
                        &shares_to_weight(shares).to_string(),
                    )?;
                }
                if config.cpu_quota.is_some() || config.cpu_period.is_some() {
                    let quota = match config.cpu_quota {
                        Some(q) if q > 0 => q.to_string(),
                        _ => "max".to_string(),
                    };
                    let period = config.cpu_period.unwrap_or(QUOTA_PERIOD);
                    write(&cpu.join("cpu.max"), &format!("{quota} {period}"))?;
                }
            }
        }
        if let (Some(limit), Some(dir)) = (config.pids, self.pids_dir(cgroup)) {
            let value = if limit > 0 {
                limit.to_string()
            } else {
                "max".to_string()
            };
            write(&dir.join("pids.max"), &value)?;
        }
        if let Some(limit) = config.memory {
            let dir = self.memory_dir(cgroup);
            let (usage_file, limit_file) = match self.version() {
                Version::V1 => ("memory.usage_in_bytes", "memory.limit_in_bytes"),
                Version::V2 => ("memory.current", "memory.max"),
            };
            if limit > 0 {
                let usage = read_i64(&dir.join(usage_file))?;
                if limit < usage {
                    return Err(CgroupError::MemoryBelowUsage {
                        cgroup: cgroup.to_string(),
                        limit,
                        usage,
                    });
                }
                write(&dir.join(limit_file), &limit.to_string())?;
            } else {
                let none = match self.version() {
                    Version::V1 => "-1",
                    Version::V2 => "max",
                };
                write(&dir.join(limit_file), none)?;
            }
        }
        Ok(())
    }

    /// The cgroup's memory usage in bytes (memory.current, or v1's usage_in_bytes).
    pub fn memory_usage(&self, cgroup: &str) -> Result<i64, CgroupError> {
        let file = match self.version() {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        read_i64(&self.memory_dir(cgroup).join(file))
    }

    /// Removes the cgroup and anything left under it, in every hierarchy mounted under
    /// the hierarchies' common parent (runc leaves a leaf in each, e.g. freezer, devices).
    /// A cgroup that still has processes is refused by the kernel: such a directory stays,
    /// and is named in the result. Blocking.
    pub fn remove(&self, cgroup: &str) -> Vec<PathBuf> {
        let _timed = crate::metrics::cgroup_op("destroy");
        crate::pod::files::remove_cgroup_everywhere(&self.mount_parent(), cgroup)
    }

    /// The folder holding every hierarchy's mount (`/sys/fs/cgroup`), or the v2 root.
    fn mount_parent(&self) -> PathBuf {
        match &self.layout {
            Layout::V1 { memory, .. } => memory
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| memory.clone()),
            Layout::V2 { root } => root.clone(),
        }
    }
}

fn make_dir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: dir.into(),
            source,
        }),
    }
}

/// Enables the controllers the agent limits for `dir`'s children; one at a time, so a
/// controller the kernel lacks does not stop the others.
fn enable_controllers(dir: &Path) {
    let file = dir.join("cgroup.subtree_control");
    for controller in ["+cpu", "+memory", "+pids"] {
        let _ = std::fs::write(&file, controller);
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.into(),
        value: value.to_string(),
        source,
    })
}

/// A usage file. One that is missing means no usage to protect (the memory controller is
/// not on for this cgroup, or a fake tree in tests): the limit's own write then says
/// whether the limit can be set at all.
fn read_i64(path: &Path) -> Result<i64, CgroupError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(CgroupError::Read {
            path: path.into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_string()
    }

    #[test]
    fn cfs_conversions_are_upstreams() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(2500), 2560);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD), 0);
        assert_eq!(milli_cpu_to_quota(5, QUOTA_PERIOD), 1000, "at least 1 ms");
        assert_eq!(milli_cpu_to_quota(250, QUOTA_PERIOD), 25_000);
        assert_eq!(milli_cpu_to_quota(1000, QUOTA_PERIOD), 100_000);
        assert_eq!(milli_cpu_to_quota(1500, 50_000), 75_000);
        // KEP 2254's table: 2 -> 1, 1024 -> 39, 262144 -> 10000.
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(102), 4);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(2048), 79);
        assert_eq!(shares_to_weight(MAX_SHARES), 10_000);
    }

    /// A fake v1 tree: the directories exist (as the kernel makes them) and usage files
    /// hold what the test says.
    fn v1_tree(usage: i64) -> (tempfile::TempDir, CgroupFs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = CgroupFs::v1_at(dir.path());
        fs.create("/kubepods/burstable/podu").unwrap();
        std::fs::write(
            dir.path()
                .join("memory/kubepods/burstable/podu/memory.usage_in_bytes"),
            usage.to_string(),
        )
        .unwrap();
        (dir, fs)
    }

    #[test]
    fn v1_files_hold_the_values() {
        let (dir, fs) = v1_tree(4096);
        assert!(fs.exists("/kubepods/burstable/podu"));
        assert_eq!(fs.dirs("/kubepods").len(), 4, "cpu, cpuacct, memory, pids");
        let config = ResourceConfig {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(QUOTA_PERIOD),
            memory: Some(64 << 20),
            pids: Some(100),
        };
        fs.apply("/kubepods/burstable/podu", &config).unwrap();
        let p = |c: &str, f: &str| dir.path().join(c).join("kubepods/burstable/podu").join(f);
        assert_eq!(read(p("cpu", "cpu.shares")), "512");
        assert_eq!(read(p("cpu", "cpu.cfs_quota_us")), "50000");
        assert_eq!(read(p("cpu", "cpu.cfs_period_us")), "100000");
        assert_eq!(
            read(p("memory", "memory.limit_in_bytes")),
            (64 << 20).to_string()
        );
        assert_eq!(read(p("pids", "pids.max")), "100");
        // No quota and no pids limit read as the kernel's spellings.
        let none = ResourceConfig {
            cpu_quota: Some(-1),
            pids: Some(-1),
            memory: Some(0),
            ..ResourceConfig::default()
        };
        fs.apply("/kubepods/burstable/podu", &none).unwrap();
        assert_eq!(read(p("cpu", "cpu.cfs_quota_us")), "-1");
        assert_eq!(read(p("pids", "pids.max")), "max");
        assert_eq!(read(p("memory", "memory.limit_in_bytes")), "-1");
        assert_eq!(read(p("cpu", "cpu.shares")), "512", "unset settings stay");
    }

    #[test]
    fn v2_files_hold_the_values() {
        let dir = tempfile::tempdir().unwrap();
        let fs = CgroupFs::v2_at(dir.path());
        fs.create("/kubepods/besteffort/podu").unwrap();
        assert_eq!(
            read(
                dir.path()
                    .join("kubepods/besteffort/cgroup.subtree_control")
            ),
            "+pids",
            "the controllers were enabled (a plain file keeps the last write)"
        );
        let config = ResourceConfig {
            cpu_shares: Some(1024),
            cpu_quota: Some(150_000),
            cpu_period: Some(QUOTA_PERIOD),
            memory: Some(1 << 30),
            pids: Some(42),
        };
        fs.apply("/kubepods/besteffort/podu", &config).unwrap();
        let p = |f: &str| dir.path().join("kubepods/besteffort/podu").join(f);
        assert_eq!(read(p("cpu.weight")), "39");
        assert_eq!(read(p("cpu.max")), "150000 100000");
        assert_eq!(read(p("memory.max")), (1u64 << 30).to_string());
        assert_eq!(read(p("pids.max")), "42");
        let none = ResourceConfig {
            cpu_shares: Some(2),
            cpu_quota: Some(-1),
            cpu_period: Some(QUOTA_PERIOD),
            memory: Some(-1),
            pids: Some(0),
        };
        fs.apply("/kubepods/besteffort/podu", &none).unwrap();
        assert_eq!(read(p("cpu.weight")), "1");
        assert_eq!(read(p("cpu.max")), "max 100000");
        assert_eq!(read(p("memory.max")), "max");
        assert_eq!(read(p("pids.max")), "max");
    }

    #[test]
    fn a_memory_limit_below_usage_is_not_written() {
        let (dir, fs) = v1_tree(200 << 20);
        let file = dir
            .path()
            .join("memory/kubepods/burstable/podu/memory.limit_in_bytes");
        std::fs::write(&file, "9223372036854771712").unwrap();
        let config = ResourceConfig {
            cpu_shares: Some(300),
            memory: Some(100 << 20),
            ..ResourceConfig::default()
        };
        let err = fs.apply("/kubepods/burstable/podu", &config).unwrap_err();
        assert!(matches!(err, CgroupError::MemoryBelowUsage { usage, .. } if usage == 200 << 20));
        assert_eq!(read(file), "9223372036854771712");
        let shares = dir.path().join("cpu/kubepods/burstable/podu/cpu.shares");
        assert_eq!(read(shares), "300", "the other settings were written");
    }

    #[test]
    fn mode_from_the_mount_table() {
        let entry = |point: &str, fs_type: &str, opts: &[&str]| MountEntry {
            root: "/".into(),
            mount_point: point.into(),
            fs_type: fs_type.into(),
            super_options: opts.iter().map(|s| s.to_string()).collect(),
        };
        // This machine's shape: separate cpu and cpuacct mounts plus cgroup2 at unified.
        let hybrid = [
            entry("/sys/fs/cgroup/cpu", "cgroup", &["rw", "cpu"]),
            entry("/sys/fs/cgroup/cpuacct", "cgroup", &["rw", "cpuacct"]),
            entry("/sys/fs/cgroup/memory", "cgroup", &["rw", "memory"]),
            entry("/sys/fs/cgroup/pids", "cgroup", &["rw", "pids"]),
            entry("/sys/fs/cgroup/unified", "cgroup2", &["rw"]),
        ];
        let fs = CgroupFs::from_mounts(Path::new("m"), &hybrid).unwrap();
        assert_eq!(fs.version(), Version::V1);
        assert_eq!(
            fs.dirs("/kubepods"),
            ["cpu", "cpuacct", "memory", "pids"]
                .map(|c| PathBuf::from(format!("/sys/fs/cgroup/{c}/kubepods")))
        );
        let unified = [entry("/sys/fs/cgroup", "cgroup2", &["rw"])];
        let fs = CgroupFs::from_mounts(Path::new("m"), &unified).unwrap();
        assert_eq!(fs.version(), Version::V2);
        assert!(CgroupFs::from_mounts(Path::new("m"), &[]).is_err());
    }
}
