//! The built-in stats collector, in place of cAdvisor.
//!
//! A [`Collector`] samples the node's and every pod's cgroups, /proc and filesystems once per
//! housekeeping tick (10 s by default) into a cache; the Summary API (`/stats/summary`), the
//! Prometheus views (`/metrics/resource`, `/metrics/cadvisor`) and eviction all read that one snapshot, so requests
//! never touch files and never fan out per container.
//!
//! Cgroup files are read through the cgroups layer ([`crate::cgroups`]: its readers, not
//! cgroups-rs, which would add ~177 dependencies and get v2 key names wrong); /proc files
//! through the small parsers in [`parse`].
//!
//! Upstream's value rules are kept: cumulative cpu in ns and `usageNanoCores` as the rate
//! between the last two samples; working set = usage − inactive_file (floored at 0);
//! available = limit − working set when limited (the node's limit is MemTotal); node memory
//! from the root cgroup (v2 root: anon + file); network from the pause process's netns with
//! eth0 inlined; filesystem capacity from statvfs and usage from directory walks.

pub mod cadvisor;
pub mod collector;
pub mod disk;
pub mod error;
pub mod machine;
pub mod parse;
pub mod prometheus;
pub mod summary;

pub use collector::{
    cgroup_of_pid, usage_nano_cores, Collector, CollectorConfig, ContainerInfo, Measure, PodInfo,
    PodLister, ReportedUsage, ReportedVolumes, SandboxInfo, Snapshot, VolumeInfo,
};
pub use error::StatsError;
pub use prometheus::{render_resource_metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
pub use summary::Summary;
