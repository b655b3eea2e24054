//! Errors of the stats collector. Each names the file or path at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    /// A cgroup file, as the cgroups layer read it.
    #[error(transparent)]
    Cgroup(#[from] crate::cgroups::CgroupError),
    #[error("statvfs {path}: {source}")]
    Statvfs {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

impl StatsError {
    pub(crate) fn read(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StatsError::Read {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        StatsError::Parse {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A missing file usually means the cgroup or process went away between listing and
    /// reading; callers treat that as "no sample" rather than a scrape error.
    pub fn is_not_found(&self) -> bool {
        match self {
            StatsError::Read { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            StatsError::Cgroup(e) => e.is_not_found(),
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, StatsError>;
