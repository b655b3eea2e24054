//! The process's open-file limit. The upstream kubelet runs with its soft RLIMIT_NOFILE
//! raised to the hard limit, because Go's runtime does that at start for every program;
//! Rust's does not, so the agent raises it itself, first thing in `main`. Everything that
//! holds descriptors draws on this one limit: sockets of 10250/10255 clients, containerd's
//! and CSI drivers' connections, log files, FIFOs, inotify. The servers' connection caps
//! ([`crate::server::connections`]) are derived from it, so clients can never take it all.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The open-file limit before and after [`raise_soft_to_hard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    /// The soft limit the process was started with.
    pub was: u64,
    /// The soft limit now.
    pub soft: u64,
    pub hard: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenFileLimitError {
    #[error("reading RLIMIT_NOFILE: {0}")]
    Read(#[source] nix::Error),
    #[error("raising the RLIMIT_NOFILE soft limit from {soft} to the hard limit {hard}: {source}")]
    Raise {
        soft: u64,
        hard: u64,
        #[source]
        source: nix::Error,
    },
}

/// The soft open-file limit now; `fallback` when it cannot be read.
pub fn current_soft_limit(fallback: u64) -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(fallback, |(soft, _)| soft)
}

/// Raises the soft open-file limit to the hard one (any process may, without privileges).
/// Child processes inherit the raised limit; the agent's are its own relay and logger, CNI
/// plugins and mount tools, none of which uses select(2), the reason Go hands children the
/// original soft limit back.
pub fn raise_soft_to_hard() -> Result<OpenFileLimit, OpenFileLimitError> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(OpenFileLimitError::Read)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .map_err(|source| OpenFileLimitError::Raise { soft, hard, source })?;
    }
    Ok(OpenFileLimit {
        was: soft,
        soft: soft.max(hard),
        hard,
    })
}
