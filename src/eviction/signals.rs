//! The eviction signals and what each one observes, read from the stats collector's Summary
//! as upstream's makeSignalObservations reads it: what is available of a resource and its
//! capacity (for percentage thresholds).

use std::collections::BTreeMap;

use crate::stats::summary::{FsStats, MemoryStats, Summary, SYSTEM_CONTAINER_PODS};

/// Upstream's eviction signals (pkg/kubelet/eviction/api).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

/// The node condition a signal's pressure sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Condition {
    Memory,
    Disk,
    Pid,
}

impl Condition {
    /// The condition's type on the Node (and in admission's message).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Condition::Memory => "MemoryPressure",
            Condition::Disk => "DiskPressure",
            Condition::Pid => "PIDPressure",
        }
    }
}

/// The resource a signal measures, as named in eviction messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

impl Signal {
    pub(crate) const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    pub(crate) fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Condition::Memory,
            Signal::PidAvailable => Condition::Pid,
            _ => Condition::Disk,
        }
    }

    pub(crate) fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// Memory signals are acted on before the others (upstream's byEvictionPriority).
    pub(crate) fn is_memory(self) -> bool {
        self.condition() == Condition::Memory
    }
}

/// What one signal observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observation {
    pub available: i64,
    pub capacity: i64,
}

pub(crate) type Observations = BTreeMap<Signal, Observation>;

/// What is available of a memory limit, out of that plus the working set (upstream's
/// capacity for memory signals).
fn memory(m: &MemoryStats) -> Option<Observation> {
    let (available, ws) = (m.available_bytes?, m.working_set_bytes?);
    Some(Observation {
        available: i64::try_from(available).ok()?,
        capacity: i64::try_from(available + ws).ok()?,
    })
}

fn fs_space(fs: &FsStats) -> Option<Observation> {
    Some(Observation {
        available: i64::try_from(fs.available_bytes?).ok()?,
        capacity: i64::try_from(fs.capacity_bytes?).ok()?,
    })
}

fn fs_inodes(fs: &FsStats) -> Option<Observation> {
    Some(Observation {
        available: i64::try_from(fs.inodes_free?).ok()?,
        capacity: i64::try_from(fs.inodes?).ok()?,
    })
}

/// The observations a Summary gives. A signal whose figures are missing is left out (no
/// pressure on it, as upstream). The image filesystem counts as dedicated only when it is
/// another filesystem than the node's; on one filesystem imagefs and containerfs observe
/// the node's (upstream reports the same figures under both names then).
pub(crate) fn observe(summary: &Summary) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    let pods = node
        .system_containers
        .iter()
        .find(|c| c.name == SYSTEM_CONTAINER_PODS)
        .and_then(|c| c.memory.as_ref());
    for (signal, m) in [
        (Signal::MemoryAvailable, node.memory.as_ref()),
        (Signal::AllocatableMemoryAvailable, pods),
    ] {
        if let Some(o) = m.and_then(memory) {
            out.insert(signal, o);
        }
    }
    if let Some(fs) = &node.fs {
        let space = fs_space(fs);
        let inodes = fs_inodes(fs);
        for (signal, o) in [
            (Signal::NodeFsAvailable, space),
            (Signal::NodeFsInodesFree, inodes),
        ] {
            if let Some(o) = o {
                out.insert(signal, o);
            }
        }
    }
    let image_fs = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref());
    let container_fs = node
        .runtime
        .as_ref()
        .and_then(|r| r.container_fs.as_ref())
        .or(image_fs);
    for (fs, space, inodes) in [
        (
            image_fs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        ),
        (
            container_fs,
            Signal::ContainerFsAvailable,
            Signal::ContainerFsInodesFree,
        ),
    ] {
        if let Some(fs) = fs {
            if let Some(o) = fs_space(fs) {
                out.insert(space, o);
            }
            if let Some(o) = fs_inodes(fs) {
                out.insert(inodes, o);
            }
        }
    }
    if let Some(r) = &node.rlimit {
        if let (Some(max), Some(current)) = (r.maxpid, r.curproc) {
            out.insert(
                Signal::PidAvailable,
                Observation {
                    available: max - current,
                    capacity: max,
                },
            );
        }
    }
    out
}

/// Whether the image filesystem is another filesystem than the node's (upstream's
/// dedicatedImageFs): then freeing images does not help the node's filesystem.
pub(crate) fn dedicated_image_fs(summary: &Summary) -> bool {
    let node_fs = summary.node.fs.as_ref();
    let image_fs = summary
        .node
        .runtime
        .as_ref()
        .and_then(|r| r.image_fs.as_ref());
    match (node_fs, image_fs) {
        // statvfs of one filesystem gives the same capacity and inode count; two
        // filesystems that match on both are treated as one, which only means images are
        // tried first for the node's filesystem too.
        (Some(n), Some(i)) => n.capacity_bytes != i.capacity_bytes || n.inodes != i.inodes,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_come_from_the_node_the_pods_cgroup_the_filesystems_and_the_pid_limit() {
        let t = "2026-12-04T10:00:00Z";
        let fs = |avail: u64| {
            serde_json::json!({"time": t, "availableBytes": avail,
            "capacityBytes": 1000, "inodesFree": 40, "inodes": 100})
        };
        let summary: Summary = serde_json::from_value(serde_json::json!({
            "node": {
                "nodeName": "n", "startTime": t,
                "memory": {"time": t, "availableBytes": 600, "workingSetBytes": 400},
                "systemContainers": [{"name": "pods", "startTime": t,
                    "memory": {"time": t, "availableBytes": 50, "workingSetBytes": 150}}],
                "fs": fs(300),
                "runtime": {"imageFs": fs(200)},
                "rlimit": {"time": t, "maxpid": 4000, "curproc": 3900},
            },
            "pods": [],
        }))
        .unwrap();
        let o = observe(&summary);
        let get = |s: Signal| o.get(&s).map(|o| (o.available, o.capacity));
        assert_eq!(get(Signal::MemoryAvailable), Some((600, 1000)));
        assert_eq!(get(Signal::AllocatableMemoryAvailable), Some((50, 200)));
        assert_eq!(get(Signal::NodeFsAvailable), Some((300, 1000)));
        assert_eq!(get(Signal::NodeFsInodesFree), Some((40, 100)));
        assert_eq!(get(Signal::ImageFsAvailable), Some((200, 1000)));
        assert_eq!(
            get(Signal::ContainerFsAvailable),
            Some((200, 1000)),
            "the image fs's"
        );
        assert_eq!(get(Signal::PidAvailable), Some((100, 4000)));
        assert_eq!(Signal::PidAvailable.condition().name(), "PIDPressure");
        assert!(
            !dedicated_image_fs(&summary),
            "same capacity and inodes: one filesystem"
        );
    }
}
