//! The cgroupfs manager of a v1 host: one directory per cgroup in each controller's
//! hierarchy (cpu, cpuacct, memory, pids), values in v1's files (cpu.shares,
//! cpu.cfs_quota_us, memory.limit_in_bytes, ...).

use std::path::{Path, PathBuf};

use super::cgroupfs::{apply_memory, make_dir, read_i64, write, MemoryFiles};
use super::convert::{pids_max, v1_quota};
use super::error::Result;
use super::hierarchy::{Cgroups, Layout, V1Mounts};
use super::manager::{Manager, ResourceConfig};
use super::oom::killed_in;
use super::remove::remove_everywhere;
use super::Version;

const MEMORY: MemoryFiles = MemoryFiles {
    usage: "memory.usage_in_bytes",
    limit: "memory.limit_in_bytes",
    none: "-1",
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupfsV1 {
    cgroups: Cgroups,
    mounts: V1Mounts,
}

impl CgroupfsV1 {
    /// The manager of v1 hierarchies; None when `cgroups` is a unified host.
    pub fn new(cgroups: Cgroups) -> Option<CgroupfsV1> {
        match &cgroups.layout {
            Layout::V1(mounts) => Some(CgroupfsV1 {
                mounts: mounts.clone(),
                cgroups,
            }),
            Layout::V2 { .. } => None,
        }
    }

    /// v1 hierarchies at `root/{cpu,cpuacct,memory,pids,blkio}` (unit tests pass a
    /// temporary folder).
    pub fn at(root: impl AsRef<Path>) -> CgroupfsV1 {
        let cgroups = Cgroups::v1_at(root);
        let Layout::V1(mounts) = &cgroups.layout else {
            unreachable!("v1_at makes a v1 layout")
        };
        CgroupfsV1 {
            mounts: mounts.clone(),
            cgroups,
        }
    }

    /// Every directory that is this cgroup (one per hierarchy the agent writes).
    pub fn dirs(&self, cgroup: &str) -> Vec<PathBuf> {
        let cpu = self.mounts.cpu_or_cpuacct();
        let cpuacct = self.mounts.cpuacct_or_cpu();
        let mut out = vec![cpu.dir(cgroup)];
        if cpuacct.mount_point != cpu.mount_point {
            out.push(cpuacct.dir(cgroup));
        }
        out.push(self.mounts.memory.dir(cgroup));
        out.extend(self.mounts.pids.iter().map(|p| p.dir(cgroup)));
        out
    }
}

impl Manager for CgroupfsV1 {
    fn version(&self) -> Version {
        Version::V1
    }

    fn hierarchies(&self) -> &Cgroups {
        &self.cgroups
    }

    fn exists(&self, cgroup: &str) -> bool {
        self.dirs(cgroup).iter().all(|d| d.is_dir())
    }

    fn create(&self, cgroup: &str) -> Result<()> {
        for dir in self.dirs(cgroup) {
            make_dir(&dir)?;
        }
        Ok(())
    }

    fn apply(&self, cgroup: &str, config: &ResourceConfig) -> Result<()> {
        let cpu = self.mounts.cpu_or_cpuacct().dir(cgroup);
        if let Some(shares) = config.cpu_shares {
            write(&cpu.join("cpu.shares"), &shares.to_string())?;
        }
        // The period first: a quota is checked against the period in force.
        if let Some(period) = config.cpu_period {
            write(&cpu.join("cpu.cfs_period_us"), &period.to_string())?;
        }
        if let Some(quota) = config.cpu_quota {
            write(&cpu.join("cpu.cfs_quota_us"), &v1_quota(quota).to_string())?;
        }
        if let (Some(limit), Some(pids)) = (config.pids, &self.mounts.pids) {
            write(&pids.dir(cgroup).join("pids.max"), &pids_max(limit))?;
        }
        if let Some(limit) = config.memory {
            apply_memory(&self.mounts.memory.dir(cgroup), &MEMORY, cgroup, limit)?;
        }
        Ok(())
    }

    fn memory_usage(&self, cgroup: &str) -> Result<i64> {
        read_i64(&self.mounts.memory.dir(cgroup).join(MEMORY.usage))
    }

    /// Swap accounting is on when the memory hierarchy has memsw files.
    fn swap_controller_available(&self, _self_cgroup: &str) -> bool {
        self.mounts
            .memory
            .dir("/")
            .join("memory.memsw.limit_in_bytes")
            .exists()
    }

    fn oom_killed(&self, cgroup: &str) -> bool {
        killed_in(&[&self.mounts.memory.dir(cgroup).join("memory.oom_control")])
    }

    /// In every hierarchy mounted beside the memory one (runc leaves a leaf in each, e.g.
    /// freezer, devices).
    fn remove(&self, cgroup: &str) -> Vec<PathBuf> {
        remove_everywhere(&self.cgroups.mount_parent(), cgroup)
    }
}
