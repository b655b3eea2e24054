//! What the cgroupfs managers share: making directories, writing values, the memory
//! limit's guard against usage. On v1 the agent's cgroups are made in the cpu, cpuacct,
//! memory and pids hierarchies (the ones it limits or reads); runc makes a container's own
//! leaf in every hierarchy when it starts it.

use std::io;
use std::path::Path;

use super::error::{CgroupError, Result};

pub(crate) fn make_dir(dir: &Path) -> Result<()> {
    match std::fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: dir.into(),
            source,
        }),
    }
}

pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.into(),
        value: value.to_string(),
        source,
    })
}

/// A usage file. One that is missing means no usage to protect (the memory controller is
/// not on for this cgroup, or a fake tree in tests): the limit's own write then says
/// whether the limit can be set at all.
pub(crate) fn read_i64(path: &Path) -> Result<i64> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(CgroupError::read(path, source)),
    }
}

/// The files of one version's memory limit.
pub(crate) struct MemoryFiles {
    pub usage: &'static str,
    pub limit: &'static str,
    /// What the limit file takes for "no limit".
    pub none: &'static str,
}

/// Writes a memory limit in `dir`: a positive limit only when not below the usage, any
/// other value as no limit.
pub(crate) fn apply_memory(
    dir: &Path,
    files: &MemoryFiles,
    cgroup: &str,
    limit: i64,
) -> Result<()> {
    if limit > 0 {
        let usage = read_i64(&dir.join(files.usage))?;
        if limit < usage {
            return Err(CgroupError::MemoryBelowUsage {
                cgroup: cgroup.to_string(),
                limit,
                usage,
            });
        }
        write(&dir.join(files.limit), &limit.to_string())
    } else {
        write(&dir.join(files.limit), files.none)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::cgroups::{
        manager_for, CgroupError, CgroupfsV1, CgroupfsV2, Cgroups, Manager, ResourceConfig,
        Version, QUOTA_PERIOD,
    };

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_string()
    }

    /// A fake v1 tree: the directories exist (as the kernel makes them) and usage files
    /// hold what the test says.
    fn v1_tree(usage: i64) -> (tempfile::TempDir, CgroupfsV1) {
        let dir = tempfile::tempdir().unwrap();
        let fs = CgroupfsV1::at(dir.path());
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
        let fs = CgroupfsV2::at(dir.path());
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
    fn the_swap_controller_is_found_where_upstream_looks() {
        let root = tempfile::tempdir().unwrap();
        let v2 = CgroupfsV2::at(root.path());
        let own = root.path().join("system.slice/agent.service");
        std::fs::create_dir_all(&own).unwrap();
        let cgroup = "0::/system.slice/agent.service\n";
        assert!(!v2.swap_controller_available(cgroup));
        std::fs::write(own.join("memory.swap.max"), "max\n").unwrap();
        assert!(v2.swap_controller_available(cgroup));
        std::fs::write(root.path().join("memory.swap.max"), "max\n").unwrap();
        assert!(
            !v2.swap_controller_available("0::/elsewhere\n"),
            "the agent's own cgroup is asked, not the root"
        );
        let v1 = CgroupfsV1::at(root.path());
        std::fs::create_dir_all(root.path().join("memory")).unwrap();
        assert!(!v1.swap_controller_available(""));
        std::fs::write(
            root.path().join("memory/memory.memsw.limit_in_bytes"),
            "9\n",
        )
        .unwrap();
        assert!(v1.swap_controller_available(""));
    }

    #[test]
    fn oom_kills_and_pressure_by_version() {
        let (dir, v1) = v1_tree(0);
        let memory = dir.path().join("memory/kubepods/burstable/podu");
        assert!(!v1.oom_killed("/kubepods/burstable/podu"));
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 1\n",
        )
        .unwrap();
        assert!(v1.oom_killed("/kubepods/burstable/podu"));
        assert_eq!(v1.pressure("/kubepods/burstable/podu").unwrap(), None);
        let root = tempfile::tempdir().unwrap();
        let v2 = CgroupfsV2::at(root.path());
        v2.create("/a").unwrap();
        std::fs::write(root.path().join("a/memory.events"), "oom 1\noom_kill 2\n").unwrap();
        assert!(v2.oom_killed("/a"));
        assert!(!v2.oom_killed("/gone"));
        assert_eq!(v2.pressure("/a").unwrap(), Some(Default::default()));
    }

    #[test]
    fn hybrid_v1_writes_cpu_cpuacct_memory_and_pids() {
        let c = Cgroups::detect_from(&crate::cgroups::testdata("proc/mountinfo.hybrid")).unwrap();
        let v1 = CgroupfsV1::new(c.clone()).unwrap();
        assert_eq!(
            v1.dirs("/kubepods"),
            ["cpu", "cpuacct", "memory", "pids"]
                .map(|c| PathBuf::from(format!("/sys/fs/cgroup/{c}/kubepods")))
        );
        assert_eq!(CgroupfsV2::new(c), None, "one manager per version");
    }

    #[test]
    fn the_manager_follows_the_hierarchy() {
        let v1 = manager_for(Cgroups::v1_at("/x"));
        assert_eq!(v1.version(), Version::V1);
        let v2 = manager_for(Cgroups::v2_at("/x"));
        assert_eq!(v2.version(), Version::V2);
        assert_eq!(v2.hierarchies(), &Cgroups::v2_at("/x"));
    }

    #[test]
    fn remove_takes_the_cgroup_from_every_hierarchy() {
        // Directories only: the kernel's files vanish with their cgroup, a fake tree's not.
        let dir = tempfile::tempdir().unwrap();
        let v1 = CgroupfsV1::at(dir.path());
        v1.create("/kubepods/burstable/podu").unwrap();
        std::fs::create_dir_all(dir.path().join("freezer/kubepods/burstable/podu/leaf")).unwrap();
        assert!(v1.remove("/kubepods/burstable/podu").is_empty());
        assert!(!v1.exists("/kubepods/burstable/podu"));
        assert!(!dir.path().join("freezer/kubepods/burstable/podu").exists());
        assert!(v1.exists("/kubepods/burstable"));
    }
}
