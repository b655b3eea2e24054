//! The one error type of the cgroups layer: every variant names the file, the mount table
//! or the cgroup at fault.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("parsing {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("no {controller} cgroup hierarchy in {mountinfo}")]
    NoHierarchy {
        mountinfo: PathBuf,
        controller: &'static str,
    },
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

impl CgroupError {
    pub(crate) fn read(path: impl Into<PathBuf>, source: io::Error) -> Self {
        CgroupError::Read {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        CgroupError::Parse {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A missing file usually means the cgroup went away between listing and reading;
    /// readers treat that as "no sample" rather than a failure.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CgroupError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

pub type Result<T, E = CgroupError> = std::result::Result<T, E>;
