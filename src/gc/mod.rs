//! Garbage collection of what the node no longer needs.
//!
//! `image` is the image GC manager (upstream's imageGCManager): on a timer it measures the
//! image filesystem and, past imageGCHighThresholdPercent, removes unused images, least
//! recently used first, until use is down to imageGCLowThresholdPercent. `policy` holds its
//! decisions as plain data.

pub mod image;
pub mod policy;

pub use image::{ImageGc, ImageRuntime, Outcome, StatvfsProbe, UsageProbe};
pub use policy::{FsUsage, ImageGcPolicy};

use std::path::PathBuf;

/// Why one GC pass stopped. The pass is retried next period; nothing here is fatal.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("image filesystem {}: {source}", path.display())]
    Measure {
        path: PathBuf,
        #[source]
        source: crate::stats::StatsError,
    },
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
}
