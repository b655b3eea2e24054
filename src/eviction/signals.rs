//! The eviction signals and what each one observes, read from the stats collector's Summary
//! as upstream's makeSignalObservations reads it: what is available of a resource and its
//! capacity (for percentage thresholds).

use std::collections::BTreeMap;

use crate::stats::summary::{FsStats, Summary, SYSTEM_CONTAINER_PODS};

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
    if let Some(m) = &node.memory {
        if let (Some(available), Some(ws)) = (m.available_bytes, m.working_set_bytes) {
            out.insert(
                Signal::MemoryAvailable,
                Observation {
                    available: available as i64,
                    capacity: (available + ws) as i64,
                },
            );
        }
    }
    let pods = node
        .system_containers
        .iter()
        .find(|c| c.name == SYSTEM_CONTAINER_PODS)
        .and_then(|c| c.memory.as_ref());
    if let Some(m) = pods {
        if let (Some(available), Some(ws)) = (m.available_bytes, m.working_set_bytes) {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                Observation {
                    available: available as i64,
                    capacity: (available + ws) as i64,
                },
            );
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
