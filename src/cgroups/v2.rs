//! The cgroupfs manager of a unified (v2) host: one directory per cgroup, controllers
//! enabled for the children of each ancestor, values in v2's files (cpu.weight, cpu.max,
//! memory.max, pids.max).

use std::path::{Path, PathBuf};

use super::cgroupfs::{apply_memory, make_dir, read_i64, write, MemoryFiles};
use super::convert::{pids_max, shares_to_weight, v2_cpu_max, QUOTA_PERIOD};
use super::error::Result;
use super::hierarchy::{Cgroups, Layout};
use super::manager::{Manager, ResourceConfig};
use super::oom::killed_in;
use super::remove::remove_everywhere;
use super::Version;

const MEMORY: MemoryFiles = MemoryFiles {
    usage: "memory.current",
    limit: "memory.max",
    none: "max",
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupfsV2 {
    cgroups: Cgroups,
    root: PathBuf,
}

impl CgroupfsV2 {
    /// The manager of a unified hierarchy; None when `cgroups` is a v1 host.
    pub fn new(cgroups: Cgroups) -> Option<CgroupfsV2> {
        match &cgroups.layout {
            Layout::V2 { root } => Some(CgroupfsV2 {
                root: root.clone(),
                cgroups,
            }),
            Layout::V1(_) => None,
        }
    }

    /// A unified hierarchy at `root` (unit tests pass a temporary folder).
    pub fn at(root: impl AsRef<Path>) -> CgroupfsV2 {
        let root = root.as_ref().to_path_buf();
        CgroupfsV2 {
            cgroups: Cgroups::v2_at(&root),
            root,
        }
    }

    fn dir(&self, cgroup: &str) -> PathBuf {
        self.root.join(cgroup.trim_start_matches('/'))
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

impl Manager for CgroupfsV2 {
    fn version(&self) -> Version {
        Version::V2
    }

    fn hierarchies(&self) -> &Cgroups {
        &self.cgroups
    }

    fn exists(&self, cgroup: &str) -> bool {
        self.dir(cgroup).is_dir()
    }

    /// The cpu, memory and pids controllers are enabled for the children of each
    /// ancestor first, or the new cgroup would have no files to limit.
    fn create(&self, cgroup: &str) -> Result<()> {
        let mut dir = self.root.clone();
        for part in cgroup.split('/').filter(|p| !p.is_empty()) {
            enable_controllers(&dir);
            dir = dir.join(part);
            make_dir(&dir)?;
        }
        Ok(())
    }

    fn apply(&self, cgroup: &str, config: &ResourceConfig) -> Result<()> {
        let dir = self.dir(cgroup);
        if let Some(shares) = config.cpu_shares {
            write(
                &dir.join("cpu.weight"),
                &shares_to_weight(shares).to_string(),
            )?;
        }
        if config.cpu_quota.is_some() || config.cpu_period.is_some() {
            let period = config.cpu_period.unwrap_or(QUOTA_PERIOD);
            write(&dir.join("cpu.max"), &v2_cpu_max(config.cpu_quota, period))?;
        }
        if let Some(limit) = config.pids {
            write(&dir.join("pids.max"), &pids_max(limit))?;
        }
        if let Some(limit) = config.memory {
            apply_memory(&dir, &MEMORY, cgroup, limit)?;
        }
        Ok(())
    }

    fn memory_usage(&self, cgroup: &str) -> Result<i64> {
        read_i64(&self.dir(cgroup).join(MEMORY.usage))
    }

    /// The agent's own cgroup has memory.swap.max (the root never has it).
    fn swap_controller_available(&self, self_cgroup: &str) -> bool {
        let Some(own) = self_cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
            return false;
        };
        self.dir(own).join("memory.swap.max").exists()
    }

    fn oom_killed(&self, cgroup: &str) -> bool {
        killed_in(&[&self.dir(cgroup).join("memory.events")])
    }

    fn remove(&self, cgroup: &str) -> Vec<PathBuf> {
        remove_everywhere(&self.root, cgroup)
    }
}
