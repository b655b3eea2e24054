//! The one interface to a cgroup driver, as youki's libcgroups has it: make a cgroup, set
//! its limits, read what it uses, its OOM kills and pressure, remove it. The cgroupfs
//! managers (`CgroupfsV1`, `CgroupfsV2`) write the files themselves; which one runs is
//! decided once at start (`detect`) from the mount table.
//!
//! The systemd driver (issue 38) is the third implementation of this trait: it asks
//! systemd over D-Bus for transient slices (`kubepods.slice`, ...,
//! `kubepods-burstable-pod<uid>.slice`, StartTransientUnit with CPUWeight/CPUQuotaPerSecUSec/
//! MemoryMax/TasksMax) in `create` and `apply`, stops the unit in `remove`, and reads
//! stats, OOM kills and pressure through the same `Cgroups` reader as cgroupfs (systemd
//! owns the unit, not the files' format). It is chosen in `detect` when the configured
//! driver is systemd; callers hold an `Arc<dyn Manager>` and need no change.

use std::path::PathBuf;
use std::sync::Arc;

use super::error::Result;
use super::hierarchy::Cgroups;
use super::pressure::Pressure;
use super::stats::CgroupSample;
use super::{CgroupfsV1, CgroupfsV2, Version};

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

/// A cgroup driver. `cgroup` is always the absolute path within the hierarchy
/// (`/kubepods/burstable/pod<uid>`). Every method is blocking (file-system or D-Bus work).
pub trait Manager: std::fmt::Debug + Send + Sync {
    fn version(&self) -> Version;

    /// The hierarchies, for the readers the stats collector uses beyond `stats`.
    fn hierarchies(&self) -> &Cgroups;

    /// True when the cgroup exists wherever this driver writes it.
    fn exists(&self, cgroup: &str) -> bool;

    /// Makes the cgroup and its parents. Creating an existing cgroup changes nothing in it.
    fn create(&self, cgroup: &str) -> Result<()>;

    /// Writes the settings `config` has. The memory limit goes last, and only when it is
    /// not below the cgroup's current usage (`CgroupError::MemoryBelowUsage`).
    fn apply(&self, cgroup: &str, config: &ResourceConfig) -> Result<()>;

    /// The cgroup's memory usage in bytes.
    fn memory_usage(&self, cgroup: &str) -> Result<i64>;

    /// Whether the memory controller limits swap (upstream's swapControllerAvailable);
    /// `self_cgroup` is the text of /proc/self/cgroup.
    fn swap_controller_available(&self, self_cgroup: &str) -> bool;

    /// Whether the kernel's OOM killer acted in the cgroup.
    fn oom_killed(&self, cgroup: &str) -> bool;

    /// Removes the cgroup and anything left under it; returns what is still there (a
    /// cgroup with processes is refused by the kernel).
    fn remove(&self, cgroup: &str) -> Vec<PathBuf>;

    /// The cgroup's pressure stall information; None where the kernel keeps none per
    /// cgroup (v1).
    fn pressure(&self, cgroup: &str) -> Result<Option<Pressure>> {
        self.hierarchies().pressure(cgroup)
    }

    /// cpu, memory and pids of the cgroup.
    fn stats(&self, cgroup: &str) -> Result<CgroupSample> {
        self.hierarchies().read(cgroup)
    }
}

/// The cgroupfs manager for the hierarchies found (v1 or v2), chosen once.
pub fn manager_for(cgroups: Cgroups) -> Arc<dyn Manager> {
    match cgroups.version() {
        Version::V1 => Arc::new(CgroupfsV1::new(cgroups).expect("a v1 layout")),
        Version::V2 => Arc::new(CgroupfsV2::new(cgroups).expect("a v2 layout")),
    }
}

/// The host's cgroupfs manager, from /proc/self/mountinfo.
pub fn detect() -> Result<Arc<dyn Manager>> {
    Ok(manager_for(Cgroups::detect()?))
}
